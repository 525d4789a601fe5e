// Trees held per thread until a step marker closes their step; see the header.
#include "userspace/model/step_slicer.h"

#include <algorithm>

namespace torchprobe {

bool MatchesStepMarker(std::string_view name, std::string_view marker) {
  if (!marker.empty() && marker.back() == '*') return name.starts_with(marker.substr(0, marker.size() - 1));
  return name == marker;
}

bool StepSlicer::IsMarker(const Slice& s) const {
  return s.op_id < ops_->size() && MatchesStepMarker((*ops_)[s.op_id].name, marker_);
}

size_t StepSlicer::SubtreeEnd(const std::vector<Slice>& slices, size_t i) {
  size_t end = i + 1;
  while (end < slices.size() && slices[end].depth > slices[i].depth) ++end;
  return end;
}

size_t StepSlicer::OutermostMarkers(const std::vector<Slice>& slices, size_t begin, size_t end) const {
  size_t count = 0;
  for (size_t i = begin; i < end;) {
    if (IsMarker(slices[i])) {
      ++count;
      i = SubtreeEnd(slices, i);  // a marker inside a marker is the same step
    } else {
      ++i;
    }
  }
  return count;
}

uint32_t StepSlicer::StepName(uint64_t number) {
  ops_->push_back(OpInfo{kStepPrefix + std::to_string(number), "", "", kUserAnnotation});
  next_->AddOps(*ops_);
  return static_cast<uint32_t>(ops_->size() - 1);
}

Slice StepSlicer::MakeStep(uint64_t begin_ns, uint64_t end_ns, uint16_t depth) {
  Slice step;
  step.begin_ns = begin_ns;
  step.end_ns = end_ns;
  step.depth = depth;
  step.op_id = StepName(steps_++);
  step.frame = ~uint64_t{0};
  return step;
}

void StepSlicer::AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) {
  if (slices.empty()) return;
  ThreadSteps& t = threads_[(uint64_t{pid} << 32) | tid];
  size_t markers = OutermostMarkers(slices, 0, slices.size());
  if (markers > 1) {
    // Several steps inside one top-level tree (a loop under an annotation
    // of its own): they are found at their own level, inside it. What this
    // thread held before goes on unstepped: no marker closed it.
    Release(pid, tid, t);
    scratch_.clear();
    StepSiblings(slices, 0, slices.size(), scratch_);
    next_->AddSliceTree(pid, tid, scratch_);
    return;
  }
  for (Slice s : slices) {
    ++s.depth;
    t.held.push_back(s);
  }
  if (markers == 1) {
    // Steps follow one another: this one began where the last one ended.
    uint64_t begin = t.last_end ? std::min(t.last_end, t.held.front().begin_ns) : t.held.front().begin_ns;
    scratch_.clear();
    scratch_.push_back(MakeStep(begin, slices.front().end_ns, 0));
    scratch_.insert(scratch_.end(), t.held.begin(), t.held.end());
    next_->AddSliceTree(pid, tid, scratch_);
    t.last_end = slices.front().end_ns;
    t.held.clear();
  } else if (t.held.size() > max_held_) {
    Release(pid, tid, t);
  }
}

void StepSlicer::StepSiblings(const std::vector<Slice>& slices, size_t begin, size_t end, std::vector<Slice>& out) {
  // The siblings in [begin, end), each a subtree, and how many steps each holds.
  std::vector<std::pair<size_t, size_t>> subtrees;  // (first, end)
  std::vector<size_t> markers;
  bool one_each = true;
  for (size_t i = begin; i < end;) {
    size_t stop = SubtreeEnd(slices, i);
    subtrees.emplace_back(i, stop);
    markers.push_back(OutermostMarkers(slices, i, stop));
    one_each = one_each && markers.back() <= 1;
    i = stop;
  }
  auto copy_deeper = [&](size_t from, size_t to, uint16_t by) {
    for (size_t i = from; i < to; ++i) {
      out.push_back(slices[i]);
      out.back().depth = static_cast<uint16_t>(out.back().depth + by);
    }
  };
  if (!one_each) {
    // Steps lie further down (a loop per epoch, each under its annotation):
    // each sibling that holds several is stepped inside.
    for (size_t k = 0; k < subtrees.size(); ++k) {
      auto [first, stop] = subtrees[k];
      if (markers[k] <= 1) {
        copy_deeper(first, stop, 0);
        continue;
      }
      out.push_back(slices[first]);
      StepSiblings(slices, first + 1, stop, out);
    }
    return;
  }
  // This level: each step is the siblings up to and including one that holds
  // a marker, from where the last step ended. What follows the last marker
  // stays unstepped, as at the end of a trace.
  size_t group = 0;
  uint64_t last_end = 0;
  for (size_t k = 0; k < subtrees.size(); ++k) {
    if (markers[k] == 0) continue;
    uint64_t first_begin = slices[subtrees[group].first].begin_ns;
    uint64_t step_end = slices[subtrees[k].first].end_ns;
    out.push_back(MakeStep(last_end ? std::min(last_end, first_begin) : first_begin, step_end,
                           slices[subtrees[group].first].depth));
    copy_deeper(subtrees[group].first, subtrees[k].second, 1);
    last_end = step_end;
    group = k + 1;
  }
  if (group < subtrees.size()) copy_deeper(subtrees[group].first, end, 0);
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
