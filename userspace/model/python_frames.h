// --python-stacks: the Python frames an op was called from, as slices that
// enclose it (torch.profiler's `python_function` events), made from the
// stacks the model put on its slices (Slice::python).
//
// A TraceSink between the step slicer and the writers. In each tree it is
// handed, a slice whose stack is not its parent's gets the frames its
// parent's stack does not have as slices around it, and consecutive
// siblings called from the same frames share them: a training step's ops
// sit in one `train.py(30): train_step` slice, inside it one
// `module.py(1190): _call_impl` per module call, and so on. A frame is one
// call of a function: same code, called from the same line of the same
// caller (two calls of one function from one line, one after the other,
// are one slice: nothing between them was traced). Frames are made within
// a tree only: top-level trees (steps, or ops outside any step) each have
// their own, so the stream is never held.
//
// A frame slice is named as torch.profiler names one, "FILE(FIRST_LINE):
// QUALNAME", its op appended to the session's op table (category
// "python_function"), with the line it was called from ("caller line"); the
// slice a stack was first seen on carries its innermost frame's line
// ("python line"): so every frame's line is in the trace. A truncated
// stack's outermost frame is "<truncated>(0): outer frames not read".
#ifndef TORCHPROBE_MODEL_PYTHON_FRAMES_H
#define TORCHPROBE_MODEL_PYTHON_FRAMES_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "userspace/model/trace_sink.h"

namespace torchprobe {

inline constexpr const char* kPythonFunction = "python_function";
inline constexpr const char* kPythonLineArg = "python line";
inline constexpr const char* kCallerLineArg = "caller line";

// "FILE(FIRST_LINE): QUALNAME".
std::string PythonFrameName(const PythonCode& code);

class PythonFrames : public TraceSink {
 public:
  PythonFrames(TraceSink* next, OpTable* ops) : next_(next), ops_(ops) {}

  void Begin(const OpTable& ops, const ClockSnapshot& clock) override { next_->Begin(ops, clock); }
  void AddOps(const OpTable& ops) override { next_->AddOps(ops); }
  void AddProcess(const ProcessInfo& process) override { next_->AddProcess(process); }
  void AddThread(const ThreadInfo& thread) override { next_->AddThread(thread); }
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override;
  bool Finish(const TraceStats& stats, std::string* error) override { return next_->Finish(stats, error); }

  uint64_t frames_made() const { return frames_made_; }

 private:
  // The op id of the frame slices named `name` (appended when new).
  uint32_t FrameOp(const std::string& name);

  TraceSink* next_;
  OpTable* ops_;
  std::map<std::string, uint32_t> frame_ops_;
  bool grew_ = false;
  uint64_t frames_made_ = 0;
  std::vector<Slice> out_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_PYTHON_FRAMES_H
