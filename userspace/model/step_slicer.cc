// Trees held per thread until a step marker closes their step; see the header.
#include "userspace/model/step_slicer.h"

#include <algorithm>

namespace torchprobe {

bool MatchesStepMarker(std::string_view name, std::string_view marker) {
  if (!marker.empty() && marker.back() == '*') return name.starts_with(marker.substr(0, marker.size() - 1));
  return name == marker;
}

bool StepSlicer::HoldsMarker(const std::vector<Slice>& slices) const {
  for (const Slice& s : slices)
    if (s.op_id < ops_->size() && MatchesStepMarker((*ops_)[s.op_id].name, marker_)) return true;
  return false;
}

uint32_t StepSlicer::StepName(uint64_t number) {
  ops_->push_back(OpInfo{kStepPrefix + std::to_string(number), "", "", kUserAnnotation});
  next_->AddOps(*ops_);
  return static_cast<uint32_t>(ops_->size() - 1);
}

void StepSlicer::AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) {
  if (slices.empty()) return;
  ThreadSteps& t = threads_[(uint64_t{pid} << 32) | tid];
  for (Slice s : slices) {
    ++s.depth;
    t.held.push_back(s);
  }
  if (HoldsMarker(slices)) {
    // Steps follow one another: this one began where the last one ended.
    Slice step;
    step.begin_ns = t.last_end ? std::min(t.last_end, t.held.front().begin_ns) : t.held.front().begin_ns;
    step.end_ns = slices.front().end_ns;
    step.op_id = StepName(steps_++);
    step.frame = ~uint64_t{0};
    scratch_.clear();
    scratch_.push_back(step);
    scratch_.insert(scratch_.end(), t.held.begin(), t.held.end());
    next_->AddSliceTree(pid, tid, scratch_);
    t.last_end = step.end_ns;
    t.held.clear();
  } else if (t.held.size() > max_held_) {
    Release(pid, tid, t);
  }
}

void StepSlicer::Release(uint32_t pid, uint32_t tid, ThreadSteps& t) {
  size_t begin = 0;
  for (size_t i = 1; i <= t.held.size(); ++i) {
    if (i < t.held.size() && t.held[i].depth != 1) continue;
    scratch_.assign(t.held.begin() + static_cast<long>(begin), t.held.begin() + static_cast<long>(i));
    for (Slice& s : scratch_) --s.depth;
    next_->AddSliceTree(pid, tid, scratch_);
    begin = i;
  }
  t.held.clear();
}

bool StepSlicer::Finish(const TraceStats& stats, std::string* error) {
  for (auto& [key, t] : threads_) Release(static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key), t);
  TraceStats with_steps = stats;
  with_steps.steps = steps_;
  return next_->Finish(with_steps, error);
}

}  // namespace torchprobe
