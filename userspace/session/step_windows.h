// Windows counted in training steps, like torch.profiler's
// schedule(skip_first/wait, active, repeat): `--skip-steps K --steps N`
// captures ProfilerStep#K .. #K+N-1 into one set of files; with
// `--every-steps M` it does so again every M steps (K+M .., K+2M .., each
// window its numbered set, out.0.ext, out.1.ext, ...) until tracing stops.
//
// A TraceSink between the StepSlicer and the outputs, so a window opens and
// closes exactly where the step derivation put the boundary: each file holds
// whole ProfilerStep# slices and nothing from the steps it skipped. Slices
// outside any step (another thread's) go in when they began inside the open
// window; everything else is left out and counted (`outside_steps`). The
// probes stay attached and record through the skipped steps: the model needs
// their ops to find the boundaries. A window's stats are the capture's counts
// up to its close (events, repairs, ...), but for `steps` (its own) and
// `outside_steps` (all left out so far).
//
// Memory events (--memory) come as they happen, before the step that holds
// them is known: they wait until a step boundary past them is seen, then go
// into the open window when inside it (from its first step's begin to its
// last step's end, other threads' included) and to `memory_also` (the
// run-long timeline) with it; the rest are counted (`memory_outside_steps`).
// What waits is bounded (kMaxWaitingMemory: the oldest are counted out).
//
// Steps inside an enclosing range (a loop under `record_function("LOOP")`,
// see step_slicer.h) reach this sink only when that range ends, inside its
// tree: each window gets its steps whole with the ranges that enclose them,
// written when the enclosing range has ended (the probes record until then).
#ifndef TORCHPROBE_SESSION_STEP_WINDOWS_H
#define TORCHPROBE_SESSION_STEP_WINDOWS_H

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "userspace/model/gpu_sink.h"
#include "userspace/model/memory_sink.h"
#include "userspace/model/trace_sink.h"
#include "userspace/session/window_schedule.h"

namespace torchprobe {

struct RecordOptions;
class TraceFanout;

class StepWindows : public TraceSink, public GpuSink, public MemorySink {
 public:
  // The files of window `number` (-1: the only one, not numbered); nullptr
  // and *error when they cannot be opened.
  using Opener = std::function<std::unique_ptr<TraceSink>(int64_t number, std::string* error)>;
  // The capture's counts so far, for a window written before the end.
  using StatsNow = std::function<TraceStats()>;
  // A window was written: its number, first step and how many steps.
  using Written = std::function<void(int64_t number, uint64_t first_step, uint64_t steps)>;

  // `first`: window 0's files, opened before anything was attached.
  StepWindows(const WindowOptions& options, std::unique_ptr<TraceSink> first, Opener open, StatsNow stats_now,
              Written written, MemorySink* memory_also = nullptr);

  static constexpr size_t kMaxWaitingMemory = 1 << 22;

  // Which window step `n` (counted from 0) falls in, or -1 outside them all.
  static int64_t WindowOf(const WindowOptions& options, uint64_t n);

  // No window is left to come (the last was written, and none repeats).
  bool done() const { return done_; }

  void Begin(const OpTable& ops, const ClockSnapshot& clock) override;
  void AddOps(const OpTable& ops) override;
  void AddProcess(const ProcessInfo& process) override;
  void AddThread(const ThreadInfo& thread) override;
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override;
  // GPU activities (--cupti) come as a window is written: to its files.
  void AddGpuActivity(const GpuActivity& activity) override;
  // Waits for the step boundary past it (see above).
  void AddMemoryEvent(const MemoryEvent& event) override;
  // Writes the window still open (with the steps it got so far), or, when no
  // window was ever written, window 0's files with their root nodes only.
  bool Finish(const TraceStats& stats, std::string* error) override;

 private:
  // Writes the open window and, if `more` windows come, opens the next one's files.
  void Close(TraceStats stats, bool more);
  bool IsStep(const Slice& slice) const;
  // Counts the step that begins at `begin_ns`, opening its window if it is
  // that window's first; true when it belongs to the open window.
  bool TakeStep(uint64_t begin_ns, uint64_t end_ns);
  // The memory events before `end_ns`: into the open window when `keep` and
  // at or after its begin, else counted out.
  void SettleMemory(uint64_t end_ns, bool keep);
  // A tree whose steps are inside it: each window's steps with their ancestors.
  void AddNestedSteps(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices);

  WindowOptions options_;
  std::unique_ptr<TraceSink> next_;  // the open window's files, or the next one's
  Opener open_files_;
  StatsNow stats_now_;
  Written written_;
  const OpTable* ops_ = nullptr;
  ClockSnapshot clock_;
  std::map<uint32_t, ProcessInfo> processes_;
  std::map<uint64_t, ThreadInfo> threads_;  // by (pid, tid)
  bool begun_ = false;         // Begin seen: a next window's files are described at once
  int64_t open_ = -1;          // the window open now, or -1
  int64_t windows_written_ = 0;
  uint64_t open_from_ns_ = 0;  // where the open window began
  uint64_t steps_seen_ = 0;
  uint64_t first_step_ = 0;    // the open window's first step
  uint64_t window_steps_ = 0;  // steps in the open window
  uint64_t outside_ = 0;
  MemorySink* memory_also_;
  std::deque<MemoryEvent> memory_waiting_;  // in arrival order
  uint64_t memory_outside_ = 0;
  bool done_ = false;
  std::string error_;  // the first window whose files could not be opened or written
};

// The session's StepWindows over `first` (window 0's outputs): later windows'
// files by OpenTraceOutputs.
std::unique_ptr<StepWindows> MakeStepWindows(const RecordOptions& options, std::unique_ptr<TraceFanout> first,
                                             StepWindows::StatsNow stats_now, MemorySink* memory_also);

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_STEP_WINDOWS_H
