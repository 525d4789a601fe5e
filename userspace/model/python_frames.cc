// Python frames as slices around the ops they called; see the header.
#include "userspace/model/python_frames.h"

#include <algorithm>
#include <memory>

namespace torchprobe {
namespace {

// The marker frame outward of a truncated stack's first.
const PythonCode& TruncatedCode() {
  static const PythonCode code{"<truncated>", "outer frames not read", 0};
  return code;
}

// One frame a slice needs around it: its code, and the line its caller
// called it from (-1 for the outermost).
struct Needed {
  const PythonCode* code;
  int caller_line;
  bool operator==(const Needed& other) const = default;
};

// How many of `stack`'s outer frames `base` (the parent slice's stack)
// already has: equal code, and the same line for every frame but base's
// innermost (where the parent was entered; the child may be on another
// line of that frame).
size_t SharedWithParent(const PythonStack& stack, const PythonStack* base) {
  if (!base) return 0;
  size_t k = 0, n = base->frames.size();
  while (k < n && k < stack.frames.size() && stack.frames[k].code == base->frames[k].code &&
         (k + 1 == n || stack.frames[k].line == base->frames[k].line))
    ++k;
  return k;
}

std::shared_ptr<const SliceArgs> WithArg(const std::shared_ptr<const SliceArgs>& args, const char* name, int value) {
  auto out = args ? std::make_shared<SliceArgs>(*args) : std::make_shared<SliceArgs>();
  SliceArg arg;
  arg.name = name;
  arg.number = static_cast<uint64_t>(value);
  out->push_back(std::move(arg));
  return out;
}

}  // namespace

std::string PythonFrameName(const PythonCode& code) {
  return code.file + "(" + std::to_string(code.first_line) + "): " + code.function;
}

uint32_t PythonFrames::FrameOp(const std::string& name) {
  auto it = frame_ops_.find(name);
  if (it != frame_ops_.end()) return it->second;
  // A window before this one may have named it already (one op table per run).
  uint32_t id = static_cast<uint32_t>(ops_->size());
  for (uint32_t i = 0; i < ops_->size(); ++i)
    if ((*ops_)[i].category == kPythonFunction && (*ops_)[i].name == name) id = i;
  if (id == ops_->size()) {
    OpInfo op;
    op.name = name;
    op.category = kPythonFunction;
    ops_->push_back(std::move(op));
    grew_ = true;
  }
  frame_ops_.emplace(name, id);
  return id;
}

void PythonFrames::AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) {
  // One level of the input tree: a slice (or the root), where it went in
  // the output, and the frames open among its children.
  struct Level {
    int in_depth;
    int out_depth;
    const PythonStack* stack;
    std::vector<std::pair<Needed, size_t>> open;  // frame, index in out_
  };
  std::vector<Level> levels = {{-1, -1, nullptr, {}}};
  out_.clear();
  out_.reserve(slices.size());
  std::vector<Needed> needed;
  for (const Slice& in : slices) {
    while (levels.back().in_depth >= static_cast<int>(in.depth)) levels.pop_back();
    Level& parent = levels.back();
    const PythonStack* stack = in.python.get();
    needed.clear();
    if (stack && stack != parent.stack) {
      size_t k = SharedWithParent(*stack, parent.stack);
      if (stack->truncated && k == 0) needed.push_back({&TruncatedCode(), -1});
      for (size_t i = k; i < stack->frames.size(); ++i)
        needed.push_back({stack->frames[i].code.get(), i ? stack->frames[i - 1].line : -1});
    }  // else entered with no Python run since its parent (a C++ callee), or none: in the parent itself
    size_t keep = 0;
    while (keep < parent.open.size() && keep < needed.size() && parent.open[keep].first == needed[keep]) ++keep;
    parent.open.resize(keep);
    for (size_t j = keep; j < needed.size(); ++j) {
      Slice frame;
      frame.begin_ns = in.begin_ns;
      frame.end_ns = in.end_ns;
      frame.op_id = FrameOp(PythonFrameName(*needed[j].code));
      frame.depth = static_cast<uint16_t>(parent.out_depth + 1 + static_cast<int>(j));
      if (needed[j].caller_line >= 0) frame.args = WithArg(nullptr, kCallerLineArg, needed[j].caller_line);
      parent.open.emplace_back(needed[j], out_.size());
      out_.push_back(std::move(frame));
      ++frames_made_;
    }
    for (const auto& [frame, index] : parent.open) out_[index].end_ns = std::max(out_[index].end_ns, in.end_ns);
    Slice slice = in;
    slice.depth = static_cast<uint16_t>(parent.out_depth + 1 + static_cast<int>(parent.open.size()));
    if (stack && stack != parent.stack && !stack->frames.empty() && stack->frames.back().line >= 0)
      slice.args = WithArg(in.args, kPythonLineArg, stack->frames.back().line);
    int out_depth = slice.depth;
    out_.push_back(std::move(slice));
    levels.push_back({static_cast<int>(in.depth), out_depth, stack, {}});
  }
  if (grew_) {
    grew_ = false;
    next_->AddOps(*ops_);
  }
  next_->AddSliceTree(pid, tid, out_);
}

}  // namespace torchprobe
