// Training steps: `ProfilerStep#N` slices as torch.profiler's prof.step()
// makes them (HTA and Chakra's linker look for them), derived from the
// program's own rhythm when no profiler runs. A step ends with the top-level
// tree that holds the step marker (by default the optimizer's step
// annotation `Optimizer.step#<class>.step`; `--step-marker NAME` picks
// another annotation or op) and the next step begins there; the first
// begins with the first tree its thread hands over.
//
// A TraceSink between the model and a writer: each thread's trees are held
// until its next marker, then handed on inside their step (one level
// deeper). Trees held past `max_held` slices (a thread that does not step)
// go on unstepped, as do those after the last marker when the trace ends:
// a step is made only when its end is seen.
//
// Steps are found at the marker's own level, whatever encloses it: a
// training loop under an annotation of its own (`with record_function(
// "LOOP")`) is one top-level tree holding every marker, and its steps are
// made inside it, around the siblings that lead up to each marker (a loop
// per epoch: inside each epoch). A marker inside a marker is one step.
#ifndef TORCHPROBE_MODEL_STEP_SLICER_H
#define TORCHPROBE_MODEL_STEP_SLICER_H

#include <cstdint>
#include <string>
#include <string_view>
#include <map>
#include <vector>

#include "userspace/model/trace_sink.h"

namespace torchprobe {

inline constexpr const char* kDefaultStepMarker = "Optimizer.step#*";
inline constexpr const char* kStepPrefix = "ProfilerStep#";

// True if `name` is what `marker` names: equal, or, for a marker ending in
// '*', starting with what precedes the '*'.
bool MatchesStepMarker(std::string_view name, std::string_view marker);

class StepSlicer : public TraceSink {
 public:
  // Step names are appended to `ops` (the session's one op table, so ids
  // never collide) and announced to `next` with AddOps.
  StepSlicer(TraceSink* next, OpTable* ops, std::string marker, size_t max_held = 1 << 20)
      : next_(next), ops_(ops), marker_(std::move(marker)), max_held_(max_held) {}

  void Begin(const OpTable& ops, const ClockSnapshot& clock) override { next_->Begin(ops, clock); }
  void AddOps(const OpTable& ops) override { next_->AddOps(ops); }
  void AddProcess(const ProcessInfo& process) override { next_->AddProcess(process); }
  void AddThread(const ThreadInfo& thread) override { next_->AddThread(thread); }
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override;
  // Hands on what is still held (unstepped), then finishes `next` with the
  // number of steps made in the stats.
  bool Finish(const TraceStats& stats, std::string* error) override;

 private:
  struct ThreadSteps {
    std::vector<Slice> held;  // trees since the last step, one level deeper
    uint64_t last_end = 0;    // end of this thread's last step (0: none yet)
  };
  bool IsMarker(const Slice& s) const;
  // The end of the subtree rooted at slices[i] (pre-order, by depth).
  static size_t SubtreeEnd(const std::vector<Slice>& slices, size_t i);
  // Markers in [begin, end) not inside another marker: the steps they close.
  size_t OutermostMarkers(const std::vector<Slice>& slices, size_t begin, size_t end) const;
  // Appends the sibling subtrees in [begin, end) to `out`, stepped at the
  // level where each sibling holds at most one marker.
  void StepSiblings(const std::vector<Slice>& slices, size_t begin, size_t end, std::vector<Slice>& out);
  uint32_t StepName(uint64_t number);
  Slice MakeStep(uint64_t begin_ns, uint64_t end_ns, uint16_t depth);
  // Hands `t`'s held trees on at their own depth.
  void Release(uint32_t pid, uint32_t tid, ThreadSteps& t);

  TraceSink* next_;
  OpTable* ops_;
  std::string marker_;
  size_t max_held_;
  uint64_t steps_ = 0;  // made so far: the next one's number
  std::map<uint64_t, ThreadSteps> threads_;  // by (pid, tid): released in that order
  std::vector<Slice> scratch_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_STEP_SLICER_H
