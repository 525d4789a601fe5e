// Step-counted capture windows between the StepSlicer and the outputs; see
// the header.
#include "userspace/session/step_windows.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "userspace/model/step_slicer.h"
#include "userspace/session/record_session.h"
#include "userspace/session/trace_outputs.h"

namespace torchprobe {

StepWindows::StepWindows(const WindowOptions& options, std::unique_ptr<TraceSink> first, Opener open,
                         StatsNow stats_now, Written written, MemorySink* memory_also)
    : options_(options),
      next_(std::move(first)),
      open_files_(std::move(open)),
      stats_now_(std::move(stats_now)),
      written_(std::move(written)),
      memory_also_(memory_also) {}

int64_t StepWindows::WindowOf(const WindowOptions& options, uint64_t n) {
  if (options.steps == 0 || n < options.skip_steps) return -1;
  uint64_t d = n - options.skip_steps;
  if (options.every_steps == 0) return d < options.steps ? 0 : -1;
  uint64_t w = d / options.every_steps;
  return d - w * options.every_steps < options.steps ? static_cast<int64_t>(w) : -1;
}

void StepWindows::Begin(const OpTable& ops, const ClockSnapshot& clock) {
  ops_ = &ops;
  clock_ = clock;
  begun_ = true;
  if (next_) next_->Begin(ops, clock);
}

void StepWindows::AddOps(const OpTable& ops) {
  ops_ = &ops;
  if (next_) next_->AddOps(ops);
}

void StepWindows::AddGpuActivity(const GpuActivity& activity) {
  auto* files = open_ >= 0 ? dynamic_cast<GpuSink*>(next_.get()) : nullptr;
  if (files) files->AddGpuActivity(activity);
}

void StepWindows::AddMemoryEvent(const MemoryEvent& event) {
  if (done_) {
    ++memory_outside_;
    return;
  }
  if (memory_waiting_.size() >= kMaxWaitingMemory) {  // no step boundary for that long
    memory_waiting_.pop_front();
    ++memory_outside_;
  }
  memory_waiting_.push_back(event);
}

void StepWindows::SettleMemory(uint64_t end_ns, bool keep) {
  auto* files = keep && open_ >= 0 ? dynamic_cast<MemorySink*>(next_.get()) : nullptr;
  std::deque<MemoryEvent> later;
  for (MemoryEvent& event : memory_waiting_) {
    if (event.ts_ns >= end_ns) {
      later.push_back(std::move(event));
    } else if (files && event.ts_ns >= open_from_ns_) {
      files->AddMemoryEvent(event);
      if (memory_also_) memory_also_->AddMemoryEvent(event);
    } else {
      ++memory_outside_;
    }
  }
  memory_waiting_ = std::move(later);
}

void StepWindows::AddProcess(const ProcessInfo& process) {
  processes_[process.pid] = process;
  if (next_) next_->AddProcess(process);
}

void StepWindows::AddThread(const ThreadInfo& thread) {
  threads_[(uint64_t{thread.pid} << 32) | thread.tid] = thread;
  if (next_) next_->AddThread(thread);
}

bool StepWindows::IsStep(const Slice& slice) const {
  return ops_ && slice.op_id < ops_->size() && (*ops_)[slice.op_id].name.starts_with(kStepPrefix);
}

bool StepWindows::TakeStep(uint64_t begin_ns, uint64_t end_ns) {
  uint64_t n = steps_seen_++;
  int64_t w = WindowOf(options_, n);
  if (w >= 0 && open_ < 0 && next_) {  // a window's first step: it opens here
    open_ = w;
    open_from_ns_ = begin_ns;
    first_step_ = n;
    window_steps_ = 0;
  }
  bool inside = w >= 0 && w == open_;
  SettleMemory(end_ns, inside);
  return inside;
}

void StepWindows::AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) {
  if (slices.empty()) return;
  const Slice& top = slices.front();
  if (IsStep(top)) {
    if (TakeStep(top.begin_ns, top.end_ns)) {
      next_->AddSliceTree(pid, tid, slices);
      if (++window_steps_ == options_.steps) Close(stats_now_(), options_.every_steps > 0);
      return;
    }
  } else if (std::any_of(slices.begin() + 1, slices.end(), [this](const Slice& s) { return IsStep(s); })) {
    AddNestedSteps(pid, tid, slices);
    return;
  } else if (open_ >= 0 && top.begin_ns >= open_from_ns_) {
    // Another thread's slice, begun inside the open window.
    next_->AddSliceTree(pid, tid, slices);
    return;
  }
  outside_ += slices.size();
}

void StepWindows::AddNestedSteps(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) {
  std::vector<bool> keep(slices.size()), settled(slices.size());  // settled: kept or counted outside
  std::vector<size_t> ancestors;  // of the slice at hand, outermost first
  auto hand_on = [&] {
    std::vector<Slice> part;
    for (size_t i = 0; i < slices.size(); ++i)
      if (keep[i]) part.push_back(slices[i]);
    if (!part.empty()) next_->AddSliceTree(pid, tid, part);
    keep.assign(slices.size(), false);
  };
  // Left out: what came before `end`, but the ancestors still open (a later
  // step may bring them in).
  auto count_outside = [&](size_t end) {
    for (size_t i = 0; i < end; ++i)
      if (!settled[i] && std::find(ancestors.begin(), ancestors.end(), i) == ancestors.end()) {
        settled[i] = true;
        ++outside_;
      }
  };
  for (size_t i = 0; i < slices.size();) {
    while (!ancestors.empty() && slices[ancestors.back()].depth >= slices[i].depth) ancestors.pop_back();
    size_t end = i + 1;
    while (end < slices.size() && slices[end].depth > slices[i].depth) ++end;
    if (!IsStep(slices[i])) {
      ancestors.push_back(i++);
      continue;
    }
    if (TakeStep(slices[i].begin_ns, slices[i].end_ns)) {
      // The step whole, inside what encloses it (whole too: it is one slice).
      for (size_t a : ancestors) keep[a] = settled[a] = true;
      for (size_t j = i; j < end; ++j) keep[j] = settled[j] = true;
      if (++window_steps_ == options_.steps) {
        hand_on();
        count_outside(end);
        Close(stats_now_(), options_.every_steps > 0);
      }
    }
    i = end;
  }
  if (open_ >= 0) hand_on();
  ancestors.clear();
  count_outside(slices.size());
}

void StepWindows::Close(TraceStats stats, bool more) {
  stats.steps = window_steps_;
  stats.outside_steps = outside_;
  stats.memory_outside_steps = memory_outside_ + (more ? 0 : memory_waiting_.size());
  std::string error;
  if (!next_->Finish(stats, &error) && error_.empty()) error_ = error;
  next_.reset();
  if (written_) written_(open_, first_step_, window_steps_);
  int64_t number = open_ + 1;
  open_ = -1;
  ++windows_written_;
  if (!more || !error_.empty()) {
    done_ = true;
    return;
  }
  // The next window's files now, described up to here, so a path that
  // stopped working is found before its steps come.
  next_ = open_files_(number, &error);
  if (!next_) {
    error_ = error;
    done_ = true;
    return;
  }
  if (!begun_) return;
  next_->Begin(*ops_, clock_);
  for (const auto& [pid, process] : processes_) next_->AddProcess(process);
  for (const auto& [key, thread] : threads_) next_->AddThread(thread);
}

bool StepWindows::Finish(const TraceStats& stats, std::string* error) {
  // The open window's unfinished step: its slices come unstepped (step_slicer.h), its memory with them.
  SettleMemory(UINT64_MAX, true);
  if (open_ >= 0) {
    Close(stats, false);  // cut short: the steps it got
  } else if (windows_written_ == 0 && next_) {
    // No window's first step came: window 0 still gets its files, empty.
    first_step_ = options_.skip_steps;
    window_steps_ = 0;
    open_ = 0;
    Close(stats, false);
  }
  next_.reset();  // files opened for a window that never began: not written
  if (!error_.empty()) {
    if (error) *error = error_;
    return false;
  }
  return true;
}

std::unique_ptr<StepWindows> MakeStepWindows(const RecordOptions& options, std::unique_ptr<TraceFanout> first,
                                             StepWindows::StatsNow stats_now, MemorySink* memory_also) {
  bool numbered = options.windows.every_steps > 0;
  auto open = [&options, numbered](int64_t number, std::string* error) -> std::unique_ptr<TraceSink> {
    StatusOr<std::unique_ptr<TraceFanout>> outputs = OpenTraceOutputs(options, numbered ? number : -1);
    if (!outputs.ok()) {
      *error = outputs.status().message();
      return nullptr;
    }
    return std::move(*outputs);
  };
  auto written = [&options](int64_t number, uint64_t first_step, uint64_t steps) {
    if (options.quiet) return;
    if (steps == 0)
      std::fprintf(stderr, "torchprobe: steps window %" PRId64 " written: no step reached\n", number);
    else
      std::fprintf(stderr, "torchprobe: steps window %" PRId64 " written: %s%" PRIu64 " to %s%" PRIu64 "\n",
                   number, kStepPrefix, first_step, kStepPrefix, first_step + steps - 1);
  };
  return std::make_unique<StepWindows>(options.windows, std::move(first), open, std::move(stats_now), written,
                                       memory_also);
}

}  // namespace torchprobe
