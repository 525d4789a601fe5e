#include "userspace/session/capture_windows.h"

#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "userspace/base/clock.h"
#include "userspace/session/record_signals.h"
#include "userspace/session/trace_outputs.h"

namespace torchprobe {
namespace {

ClockSnapshot ClocksNow() {
  ClockSnapshot clock;
  clock.boottime_ns = NowNs(CLOCK_BOOTTIME);
  clock.monotonic_ns = NowNs(CLOCK_MONOTONIC);
  clock.realtime_ns = NowNs(CLOCK_REALTIME);
  return clock;
}

}  // namespace

CaptureWindows::CaptureWindows(const RecordOptions& options, OpTable* ops, ProcNames* names,
                               std::vector<std::unique_ptr<ProbeSet>>* sets,
                               std::function<void(TraceStats&)> fill_stats)
    : options_(options), ops_(ops), names_(names), sets_(sets), fill_stats_(std::move(fill_stats)) {}

Status CaptureWindows::Open() {
  if (options_.flight.seconds > 0) {  // files only for a dump
    Wire(std::make_unique<TraceFanout>());
    return Status::Ok();
  }
  WindowSchedule schedule(options_.windows, 0);
  open_ = schedule.Slot(0) != WindowSchedule::kClosed;
  StatusOr<std::unique_ptr<TraceFanout>> outputs = OpenTraceOutputs(options_, schedule.numbered() ? 0 : -1);
  if (!outputs.ok()) return outputs.status();
  Wire(std::move(*outputs));
  return Status::Ok();
}

void CaptureWindows::Wire(std::unique_ptr<TraceFanout> outputs) {
  // The previous window's model lives until the sets have taken what they
  // carry over from it (the ops set: which processes return through `ret`).
  std::unique_ptr<OpStackModel> previous = std::move(model_);
  writer_ = std::move(outputs);
  TraceFanout* files = writer_.get();
  TraceSink* outputs_sink = writer_.get();
  memory_also_ = MemorySinks();
  memory_ = MemorySinks();
  MemorySink* memory = &memory_;
  if (options_.windows.steps > 0) {  // --steps: the outputs change hands at step boundaries
    files = nullptr;
    step_windows_ = MakeStepWindows(
        options_, std::move(writer_),
        [this] {
          TraceStats stats = model_->stats();
          fill_stats_(stats);
          return stats;
        },
        &memory_also_);
    outputs_sink = step_windows_.get();
    memory = step_windows_.get();
  } else {
    memory_.Add(files);
    memory_.Add(&memory_also_);
  }
  TraceSink* trees = outputs_sink;
  for (auto& set : *sets_) trees = set->DecorateSlices(trees);
  steps_ = std::make_unique<StepSlicer>(
      trees, ops_, options_.step_marker.empty() ? kDefaultStepMarker : options_.step_marker);
  model_ = std::make_unique<OpStackModel>(steps_.get(), names_);
  ModelWiring wiring{model_.get(), outputs_sink, files, memory, &memory_also_, ops_, names_, [this] { OpsGrew(); }};
  for (auto& set : *sets_) set->Wire(wiring);
}

void CaptureWindows::Begin() {
  if (begun_) return;
  begun_ = true;
  steps_->Begin(*ops_, ClocksNow());
}

void CaptureWindows::OpsGrew() {
  if (begun_) steps_->AddOps(*ops_);
}

Status CaptureWindows::Follow(WindowSchedule& schedule, int* toggles_seen) {
  uint64_t now = NowNs();
  // One SIGUSR1 per turn: an on and an off that arrive together still make
  // a (short) window.
  if (*toggles_seen != ToggleSignals()) {
    ++*toggles_seen;
    schedule.Toggle(now);
  }
  int64_t slot = schedule.Slot(now);
  if (!begun_ || (open_ && slot == slot_)) return Status::Ok();
  if (open_) {
    Status status = Close();
    if (!status.ok()) return status;
  }
  if (slot != WindowSchedule::kClosed) {
    slot_ = slot;
    OpenNext(NowNs());
  }
  return Status::Ok();
}

Status CaptureWindows::Close() {
  close_gate_();  // as at the stop
  open_ = false;
  std::string error;
  if (!FinishModel(NowNs(), &error)) return Status::Error(error);
  status_line_->Clear();
  if (!options_.quiet) std::fprintf(stderr, "torchprobe: capture off: window %" PRId64 " written\n", closed_);
  // The next window's files are opened now, so a path that stopped working
  // is one line here rather than lost events later.
  StatusOr<std::unique_ptr<TraceFanout>> outputs = OpenTraceOutputs(options_, ++closed_);
  if (!outputs.ok()) return outputs.status();
  events_before_ += model_->stats().events;
  Rewire(std::move(*outputs));
  return Status::Ok();
}

bool CaptureWindows::FinishModel(uint64_t end_ns, std::string* error) {
  TraceStats& stats = model_->stats();
  model_->FinishThreads(end_ns);
  fill_stats_(stats);
  return steps_->Finish(stats, error);
}

void CaptureWindows::Rewire(std::unique_ptr<TraceFanout> outputs) {
  TraceStats planned = NextWindowStats(model_->stats());  // what planning and attaching counted carries over
  Wire(std::move(outputs));
  model_->stats() = planned;
}

void CaptureWindows::OpenNext(uint64_t now) {
  if (closed_ > 0) steps_->Begin(*ops_, ClocksNow());  // the first was begun at the first attach
  model_->SetStart(now);
  open_ = true;
  bpf_->SetGate(GATE_OPEN);
  status_line_->Clear();
  if (!options_.quiet) std::fprintf(stderr, "torchprobe: capture on: window %" PRId64 "\n", closed_);
}

Status CaptureWindows::WriteDump(const RecordOptions& dump_options, uint64_t from_ns, uint64_t to_ns,
                                 const std::function<void()>& replay,
                                 const std::function<void(const OpStackModel&)>& before_finish) {
  StatusOr<std::unique_ptr<TraceFanout>> outputs = OpenTraceOutputs(dump_options);
  if (!outputs.ok()) return outputs.status();
  Rewire(std::move(*outputs));
  // The clocks as they were at `from_ns` (read now, moved back together):
  // the writers' timelines start there, and the replayed events are older
  // than now.
  ClockSnapshot clock = ClocksNow();
  uint64_t back = clock.monotonic_ns > from_ns ? clock.monotonic_ns - from_ns : 0;
  clock.monotonic_ns -= back;
  clock.boottime_ns -= std::min(back, clock.boottime_ns);
  clock.realtime_ns -= std::min(back, clock.realtime_ns);
  steps_->Begin(*ops_, clock);
  model_->SetStart(from_ns);
  replay();
  before_finish(*model_);
  std::string error;
  bool written = FinishModel(to_ns, &error);
  Rewire(std::make_unique<TraceFanout>());  // idle again
  steps_->Begin(*ops_, ClocksNow());
  return written ? Status::Ok() : Status::Error(error);
}

bool CaptureWindows::Finish(TraceStats& stats, std::string* error) {
  return !open_ || steps_->Finish(stats, error);
}

}  // namespace torchprobe
