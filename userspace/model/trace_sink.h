// What the model hands to a writer. The model streams: a thread's slices are
// handed over one finished top-level tree at a time, in pre-order (a parent
// before its children), so writers never hold the whole trace in memory.
#ifndef TORCHPROBE_MODEL_TRACE_SINK_H
#define TORCHPROBE_MODEL_TRACE_SINK_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "userspace/base/op_table.h"
#include "userspace/base/trace_stats.h"
#include "userspace/model/op_inputs.h"
#include "userspace/model/python_stack.h"
#include "userspace/model/slice_args.h"

namespace torchprobe {

// Flags on a slice that the model had to repair.
enum SliceFlags : uint8_t {
  kSliceBeginUnseen = 1 << 0,  // its entry was before the trace started, or lost
  kSliceEndUnseen = 1 << 1,    // its return was after the trace stopped, or lost
  kSliceUnwound = 1 << 2,      // a C++ exception unwound it: it ends where it was caught
};

struct Slice {
  uint64_t begin_ns = 0;  // CLOCK_MONOTONIC ns
  uint64_t end_ns = 0;    // CLOCK_MONOTONIC ns, >= begin_ns
  uint32_t op_id = 0;     // index into the OpTable
  uint16_t depth = 0;     // 0 for a top-level op
  uint8_t flags = 0;      // SliceFlags
  uint64_t frame = 0;     // user stack address of the call (tp_op_event.frame)
  std::shared_ptr<const OpInputs> inputs = nullptr;  // --shapes: what the op was called with; null if not read
  std::shared_ptr<const SliceArgs> args = nullptr;    // a CUDA call's or collective's arguments; null if none
  std::shared_ptr<const PythonStack> python = nullptr;  // --python-stacks: the stack it was entered under
};

struct ProcessInfo {
  uint32_t pid = 0;
  std::string name;     // /proc/PID/comm
  std::string cmdline;  // /proc/PID/cmdline, NULs replaced by spaces
  int64_t rank = -1;    // the RANK in its environment (torchrun, mpirun); -1 if none
};

struct ThreadInfo {
  uint32_t pid = 0;
  uint32_t tid = 0;
  std::string name;  // /proc/PID/task/TID/comm, or the comm seen at exit
};

struct ClockSnapshot {
  uint64_t boottime_ns = 0;   // CLOCK_BOOTTIME
  uint64_t monotonic_ns = 0;  // CLOCK_MONOTONIC, read right after
  uint64_t realtime_ns = 0;   // CLOCK_REALTIME, read right after (0: not read): lines
                              // up traces of hosts whose monotonic clocks differ
};

class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // Called once, before anything else.
  virtual void Begin(const OpTable& ops, const ClockSnapshot& clock) = 0;
  // The op table grew (another libtorch image was planned): ops[i] for every
  // i past what the sink knows are new.
  virtual void AddOps(const OpTable& ops) {}
  // A process or thread is described before its first slice tree.
  virtual void AddProcess(const ProcessInfo& process) = 0;
  virtual void AddThread(const ThreadInfo& thread) = 0;
  // One finished top-level op and all it called, in pre-order.
  virtual void AddSliceTree(uint32_t pid, uint32_t tid,
                            const std::vector<Slice>& slices) = 0;
  // Called once, last. Returns false (and errno-style message) on I/O error.
  virtual bool Finish(const TraceStats& stats, std::string* error) = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_TRACE_SINK_H
