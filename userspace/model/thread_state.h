// --sched: a traced thread's time off its CPU, as the writers and `report`
// see it. One OffCpu per time off (bpf/sched.bpf.c's EV_OFFCPU), cut into
// the spans a thread-state track shows: asleep (why, and in which system
// call), waiting for the GIL, then runnable until it ran again. A writer
// that takes them implements ThreadStateSink beside TraceSink.
#ifndef TORCHPROBE_MODEL_THREAD_STATE_H
#define TORCHPROBE_MODEL_THREAD_STATE_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace torchprobe {

struct OffCpu {
  enum Kind : uint8_t { kPreempted, kBlocked, kGil };
  uint32_t pid = 0, tid = 0;
  uint64_t off_ns = 0;   // switched out
  uint64_t wake_ns = 0;  // woken (kBlocked, kGil); 0: the wakeup was not seen
  uint64_t on_ns = 0;    // running again
  Kind kind = kPreempted;
  char state = 'S';      // kBlocked: the task state it slept in (S, D, ...)
  std::string wait;      // kBlocked, kGil: the system call it slept in ("futex", "read"; "" none)
};

// The span names of a thread-state track: "Runnable (preempted)",
// "Runnable (woken)", "GIL wait", "Blocked (S): futex" (the state, and the
// system call when it slept in one).
inline constexpr std::string_view kRunnablePrefix = "Runnable";
inline constexpr std::string_view kGilWaitName = "GIL wait";
inline constexpr std::string_view kBlockedPrefix = "Blocked";
// Their category in the trace (the track's slices).
inline constexpr const char* kThreadStateCategory = "thread_state";

struct ThreadStateSpan {
  uint64_t begin_ns = 0, end_ns = 0;
  std::string name;
};

// The spans of one time off the CPU, in time order, none empty.
std::vector<ThreadStateSpan> SpansOf(const OffCpu& off);

// What a span's name says: runnable, blocked or waiting for the GIL, and,
// blocked, where ("futex", "read (D)"; "" when it slept outside a system call).
enum class SpanKind { kRunnable, kBlocked, kGil, kOther };
SpanKind KindOfSpan(std::string_view name, std::string* where = nullptr);

class ThreadStateSink {
 public:
  virtual ~ThreadStateSink() = default;
  virtual void AddOffCpu(const OffCpu& off) = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_THREAD_STATE_H
