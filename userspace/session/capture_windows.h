// What a `record` run captures into: the op model and the outputs it feeds
// (through the step slicer, and with --steps the step windows), made fresh
// for each capture window (--start-after, --window/--every, SIGUSR1). The
// probes stay attached between windows; the BPF gate decides what is
// recorded: open into this window's model and files, or closed with the
// window's files written and the next window's opened. Each probe set gets
// every window's model and outputs (ProbeSet::Wire).
#ifndef TORCHPROBE_SESSION_CAPTURE_WINDOWS_H
#define TORCHPROBE_SESSION_CAPTURE_WINDOWS_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "userspace/export/trace_fanout.h"
#include "userspace/model/op_stack_model.h"
#include "userspace/model/step_slicer.h"
#include "userspace/probe_sets/probe_set.h"
#include "userspace/session/proc_names.h"
#include "userspace/session/record_session.h"
#include "userspace/session/status_line.h"
#include "userspace/session/step_windows.h"
#include "userspace/session/window_schedule.h"

namespace torchprobe {

class CaptureWindows {
 public:
  // `fill_stats`: the counts the model cannot know, into a window's stats
  // before it is written.
  CaptureWindows(const RecordOptions& options, OpTable* ops, ProcNames* names,
                 std::vector<std::unique_ptr<ProbeSet>>* sets, std::function<void(TraceStats&)> fill_stats);

  // The first window's files (a bad path is one line, before anything is
  // attached) and models; whether capture starts open (not --start-after).
  Status Open();
  // How a window is closed (`close_gate`: the gate shut once the open ops
  // returned) and opened; the status line cleared before a window's line.
  void SetControls(BpfPrograms* bpf, std::function<void()> close_gate, StatusLine* status_line) {
    bpf_ = bpf;
    close_gate_ = std::move(close_gate);
    status_line_ = status_line;
  }
  // The trace begins at the first attach (idempotent).
  void Begin();
  bool begun() const { return begun_; }
  bool open() const { return open_; }
  OpStackModel& model() { return *model_; }
  // Ops were appended to the op table: the writers learn their names.
  void OpsGrew();
  // One turn: a SIGUSR1 toggles the schedule; a window closes or opens where it says.
  Status Follow(WindowSchedule& schedule, int* toggles_seen);
  // --steps: the last steps window is written.
  bool steps_done() const { return step_windows_ && step_windows_->done(); }
  // The open window's files, at the end (none when stopped between windows).
  bool Finish(TraceStats& stats, std::string* error);
  // --flight-recorder: no file is open between dumps (the model feeds an
  // idle sink). One dump: the files `dump_options` names, from a fresh model
  // fed by `replay` (records through the router); `before_finish` reads the
  // model while its slices are still open. The idle sink comes back after.
  Status WriteDump(const RecordOptions& dump_options, uint64_t from_ns, uint64_t to_ns,
                   const std::function<void()>& replay,
                   const std::function<void(const OpStackModel&)>& before_finish);
  // The windows written before the current one, and their op events.
  int64_t closed() const { return closed_; }
  uint64_t events_before() const { return events_before_; }

 private:
  void Wire(std::unique_ptr<TraceFanout> outputs);
  // Wire, the new model keeping what planning and attaching counted.
  void Rewire(std::unique_ptr<TraceFanout> outputs);
  // The model's open slices closed at `end_ns`, its stats filled, its files written.
  bool FinishModel(uint64_t end_ns, std::string* error);
  Status Close();
  void OpenNext(uint64_t now);

  const RecordOptions& options_;
  OpTable* ops_;
  ProcNames* names_;
  std::vector<std::unique_ptr<ProbeSet>>* sets_;
  std::function<void(TraceStats&)> fill_stats_;
  BpfPrograms* bpf_ = nullptr;
  std::function<void()> close_gate_;
  StatusLine* status_line_ = nullptr;
  std::unique_ptr<TraceFanout> writer_;         // every output file
  MemorySinks memory_;       // without --steps: allocations to writer_ and memory_also_
  MemorySinks memory_also_;  // the sets' run-long memory sinks (the timeline)
  std::unique_ptr<StepWindows> step_windows_;   // --steps: between steps_ and the outputs
  std::unique_ptr<StepSlicer> steps_;           // between the model and the outputs
  std::unique_ptr<OpStackModel> model_;
  bool begun_ = false;
  bool open_ = true;     // the probes' gate is open into writer_ and model_
  int64_t slot_ = 0;     // WindowSchedule slot of the window open or last open
  int64_t closed_ = 0;   // windows closed so far
  uint64_t events_before_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_CAPTURE_WINDOWS_H
