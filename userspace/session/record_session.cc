// The record pipeline; see the header. Order matters for the target's sake:
// everything that can fail (discovery, privileges, the output files) is
// checked before a single probe is attached, and every link belongs to the
// keeper, so the probes come off however torchprobe ends.
//
// The session is the lifecycle only: the probe sets (probe_set_registry.cc)
// say what BPF loads, attach to each target (target_tracker.h) and decode
// their events (the router); the capture windows (capture_windows.h) own
// the model and the files.
//
// Stopping: the BPF gate first lets only the returns of open ops through,
// then nothing; the trace is written then, and the probes are removed after,
// by the keeper, hottest first (per-symbol probes take ~50 ms each).
#include "userspace/session/record_session.h"

#include <cstdio>
#include <memory>

#include "userspace/attach/preflight.h"
#include "userspace/attach/probe_keeper.h"
#include "userspace/attach/uprobe_multi.h"
#include "userspace/base/clock.h"
#include "userspace/base/counted.h"
#include "userspace/collect/ring_reader.h"
#include "userspace/session/capture_windows.h"
#include "userspace/session/flight_recorder.h"
#include "userspace/session/probe_removal.h"
#include "userspace/session/probe_set_registry.h"
#include "userspace/session/proc_names.h"
#include "userspace/session/record_signals.h"
#include "userspace/session/run_summary.h"
#include "userspace/session/status_line.h"
#include "userspace/session/target_tracker.h"
#include "userspace/session/trace_outputs.h"

namespace torchprobe {
namespace {

int Fail(const Status& status) {
  std::fprintf(stderr, "torchprobe: %s\n", status.message().c_str());
  return 1;
}

class RecordSession {
 public:
  explicit RecordSession(const RecordOptions& options) : options_(options), reader_(&router_) {}

  int Run();

 private:
  // How long a turn of the loop waits for the ring. Each turn wakes this
  // process, which on a busy host takes a CPU from the target: at 20 ms a
  // light-tier flight recorder cost a 2-core training loop +8% of its step
  // time, at 250 ms +0.7% (make bench --part flight). The light tier's
  // events are few (steps, collectives, waits), and what must not wait
  // (forks, execs, exits, library loads, signals) wakes the loop at once.
  int DrainMs() const { return options_.flight.seconds > 0 && options_.flight.light ? kLightTierDrainMs : options_.drain_ms; }
  static constexpr int kLightTierDrainMs = 250;
  Status Prepare();
  // Starts tracing: the launched command, or every named process.
  Status Start();
  // Thread exits, once the op ring holds none of the exited threads' events.
  void ApplyExits();
  // Ends capture into the model: returns of open ops drain, then the gate shuts.
  void CloseGate();
  void RemoveProbes();
  // The counts the model cannot know, into a window's stats before it is written.
  void FillStats(TraceStats& stats);
  void PrintSummary(const TraceStats& stats);

  const RecordOptions& options_;
  bool launch_ = false;
  bool use_multi_ = true;
  std::unique_ptr<ProbeKeeper> keeper_;
  std::unique_ptr<BpfPrograms> bpf_;
  OpTable ops_;
  ProcNames names_;
  EventRouter router_;
  RingReader reader_;
  StatusLine status_line_{false};
  RunProbeSets sets_;
  std::unique_ptr<CaptureWindows> windows_;
  std::unique_ptr<TargetTracker> targets_;
  std::unique_ptr<FlightRecorder> flight_;  // --flight-recorder: the op ring's records kept, not decoded
};

Status RecordSession::Prepare() {
  launch_ = !options_.command.empty();
  Status status = CheckPrivileges();
  if (!status.ok()) return status;
  use_multi_ = options_.attach != "uprobe" && HaveUprobeMulti();
  if (options_.attach == "multi" && !use_multi_)
    return Status::Error("--attach multi: this kernel has no uprobe_multi links");
  status = CheckUprobeSupport(options_.attach != "uprobe");
  if (!status.ok()) return status;
  if (!use_multi_) RaiseFileLimit();
  StatusOr<RunProbeSets> sets = MakeProbeSets(options_, &ops_);
  if (!sets.ok()) return sets.status();
  sets_ = std::move(*sets);
  windows_ = std::make_unique<CaptureWindows>(options_, &ops_, &names_, &sets_.all,
                                              [this](TraceStats& stats) { FillStats(stats); });
  status = windows_->Open();
  if (!status.ok()) return status;
  targets_ = std::make_unique<TargetTracker>(
      TargetTracker::Options{launch_, options_.wait, options_.follow_children, options_.quiet}, sets_.ops,
      &sets_.all, &names_, [this]() -> TraceStats& { return windows_->model().stats(); },
      [this] { windows_->Begin(); });
  status = targets_->Plan(options_.pids);
  if (!status.ok()) return status;

  BpfConfig config;
  config.use_uprobe_multi = use_multi_;
  config.empty_programs = options_.empty_probes;
  config.empty_uretprobes = options_.empty_uretprobes;
  config.filter_pids = launch_;  // --pid mode: the kernel filters each link by pid
  config.follow_forks = options_.follow_children;
  config.hold_forks = options_.follow_children && options_.hold_children;
  config.watch_loads = true;
  config.ring_bytes = uint64_t{options_.ring_mb} << 20;
  for (const auto& set : sets_.all) set->Configure(config);
  StatusOr<std::unique_ptr<BpfPrograms>> bpf = sets_.ops->Load(config);
  if (!bpf.ok()) return bpf.status();
  bpf_ = std::move(*bpf);
  keeper_->SetMaps(bpf_->ctl_fd(), bpf_->held_fd(), bpf_->gated_hits_fd());
  ProbeSetContext context{bpf_.get(), keeper_.get(), use_multi_};
  for (auto& set : sets_.all) set->SetContext(context);
  targets_->SetContext(context);
  windows_->SetControls(bpf_.get(), [this] { CloseGate(); }, &status_line_);
  if (!windows_->open()) bpf_->SetGate(GATE_CLOSED);  // --start-after: nothing yet
  for (auto& set : sets_.all) set->Route(router_);
  for (auto& set : sets_.all) set->RouteLate(router_);
  targets_->Route(router_);
  if (options_.flight.seconds > 0) {
    flight_ = std::make_unique<FlightRecorder>(options_, windows_.get(), &router_, &ops_, &names_);
    reader_.DivertOpRecords([this](const void* record, size_t size) { flight_->Keep(record, size); });
    flight_->SetThreadNow([this](uint32_t pid, uint32_t tid, uint64_t now_ns,
                                 std::vector<std::pair<std::string, std::string>>& notes) {
      for (auto& set : sets_.all) set->ThreadNow(pid, tid, now_ns, notes);
    });
  }
  return reader_.Open(bpf_->events_fd(), bpf_->ctl_events_fd());
}

Status RecordSession::Start() {
  if (launch_) return targets_->Launch(options_.command);
  // The window opens once every named process is attached: --duration
  // counts from there, and no op is half-seen while links go live.
  bpf_->SetGate(GATE_CLOSED);
  Status status = targets_->AttachNamed(options_.pids);
  if (!status.ok()) return status;
  bpf_->SetGate(windows_->open() ? GATE_OPEN : GATE_CLOSED);
  if (windows_->begun()) windows_->model().SetStart(NowNs());
  TestPause("recording", options_.quiet);  // every named process is traced from here on
  targets_->AdoptChildren(options_.pids);
  return Status::Ok();
}

void RecordSession::ApplyExits() {
  for (const tp_proc_event& exit : targets_->TakeExits()) {
    if (flight_) flight_->Exited(exit);
    windows_->model().OnThreadExit(exit.hdr.pid, exit.hdr.tid, exit.hdr.ts_ns, exit.comm);
    for (auto& set : sets_.all) set->ThreadExited(exit.hdr.pid, exit.hdr.tid);
    if (exit.is_leader) targets_->Exited(exit.hdr.pid);
  }
}

void RecordSession::CloseGate() {
  // No new op from here on; the ops still open may still return while the
  // ring drains once, then nothing is recorded at all.
  windows_->model().SetStop(NowNs());
  bpf_->SetGate(GATE_RETURNS_ONLY);
  bool more = false;
  reader_.Poll(options_.drain_ms, &more);
  bpf_->SetGate(GATE_CLOSED);
  reader_.DrainAll();
  ApplyExits();
}

void RecordSession::RemoveProbes() {
  for (auto& set : sets_.all) set->BeforeRemoval();
  uint64_t start = NowNs();
  keeper_->ReleaseAll();
  for (auto& set : sets_.all) set->AfterRemoval();
  TestPause("removing", options_.quiet);
  targets_->Clear();
  Removal removal = WaitForRemoval(*keeper_, status_line_, start);
  windows_->model().stats().detach_ns = removal.out_of_code_ns;
  windows_->model().stats().release_ns = removal.released_ns;
}

void RecordSession::FillStats(TraceStats& stats) {
  stats.dropped_events = bpf_->Drops(DROP_RINGBUF_FULL) + bpf_->Drops(DROP_CTL_FULL);
  stats.unknown_events = reader_.stats().unknown + reader_.stats().malformed;
  stats.attach_mode = use_multi_ ? "uprobe_multi" : "uprobe";
  for (auto& set : sets_.all) set->FillStats(stats);
}

void RecordSession::PrintSummary(const TraceStats& stats) {
  if (options_.quiet) return;
  RunSummary run;
  // --every-steps: one set of files per steps window, numbered.
  run.outputs = flight_ ? flight_->Describe() : DescribeTraceOutputs(options_, options_.windows.every_steps > 0);
  int64_t windows = windows_->closed() + windows_->open();
  if (windows_->closed() > 0 || !windows_->open())  // the numbers: all windows together
    run.outputs = Counted(windows, "window", "windows") + " of " + run.outputs;
  run.events = flight_ ? flight_->kept() : stats.events + windows_->events_before();
  for (const ProcessInfo& process : windows_->model().processes())
    run.traced.push_back(std::to_string(process.pid) + " " + process.name);
  for (const auto& set : sets_.all)
    if (std::string line = set->Summary(stats); !line.empty()) run.set_lines.push_back(line);
  run.children_unfollowed = !options_.follow_children && !launch_;
  run.why_untraced_children = !options_.hold_children ? "--no-hold-children" : targets_->why_untraced_children();
  run.probes_left = keeper_->progress().pending;
  run.keeper_pid = keeper_->pid();
  std::fputs(FormatRunSummary(run, stats).c_str(), stderr);
}

int RecordSession::Run() {
  InstallRecordSignals();
  // The keeper first, while torchprobe has one thread and no link.
  StatusOr<std::unique_ptr<ProbeKeeper>> keeper = ProbeKeeper::Start();
  if (!keeper.ok()) return Fail(keeper.status());
  keeper_ = std::move(*keeper);
  status_line_ = StatusLine(options_.quiet);
  Status error = Prepare();
  if (!error.ok()) return Fail(error);
  TestPause("planned", options_.quiet);
  error = Start();
  if (!error.ok()) {  // nothing was traced: no file is written
    targets_->StopHolding();
    RemoveProbes();
    return Fail(error);
  }
  if (flight_) flight_->Started();
  uint64_t start = NowNs();
  uint64_t deadline = options_.duration_s > 0 ? start + static_cast<uint64_t>(options_.duration_s * 1e9) : 0;
  WindowSchedule schedule(options_.windows, start);
  int toggles_seen = 0;           // the handler is in place from the start of Run
  uint64_t targets_known_ns = 0;  // every fork made before it has been read
  while (StopSignals() == 0) {
    bool more = false;
    uint64_t turn = NowNs();
    error = reader_.Poll(DrainMs(), &more);
    if (!more) targets_known_ns = turn;
    for (auto& set : sets_.all) set->Poll(targets_known_ns);
    if (!more) ApplyExits();
    if (error.ok()) error = targets_->HandleEvents();
    if (error.ok()) error = windows_->Follow(schedule, &toggles_seen);
    if (!error.ok()) break;
    uint64_t now = NowNs();
    if (flight_ && !more) flight_->Poll(now, DumpSignals());
    if ((deadline && now >= deadline) || windows_->steps_done() || !targets_->Alive()) break;
    if (!windows_->begun() && options_.wait) {
      status_line_.Show(now, "waiting for pid " + std::to_string(options_.pids.front()) + " to load " +
                                 kTorchLibrary + " (Ctrl-C to stop)");
    } else {
      status_line_.Update(now, windows_->model().stats().events, bpf_->AllDrops(), deadline);
    }
  }
  status_line_.Clear();
  targets_->StopHolding();
  CloseGate();
  TraceStats& stats = windows_->model().stats();
  windows_->model().FinishThreads(NowNs());
  FillStats(stats);
  // The trace is complete now: write it before the (maybe slow) removal.
  // Stopped between windows, the next window's files never appear.
  std::string write_error;
  TestPause("writing", options_.quiet);  // tests: a stop signal while the outputs are half written
  bool begun = windows_->begun();
  bool written = error.ok() && begun && windows_->Finish(stats, &write_error);
  for (auto& set : sets_.all)
    if (written) written = set->FinishRun(&write_error);
  RemoveProbes();
  int exit_code = 0;
  if (!error.ok()) {
    exit_code = Fail(error);
  } else if (!begun && launch_) {
    // Not an error of torchprobe's: the command ran as asked, and its own
    // status is the answer (as `time` gives it); what was not traced is said.
    std::fprintf(stderr, "torchprobe: warning: the command never loaded %s: not a PyTorch program, nothing traced, "
                 "no file written\n", kTorchLibrary);
  } else if (!begun) {
    exit_code = Fail(Status::Error("no process loaded " + std::string(kTorchLibrary) +
                                   " before tracing stopped: nothing traced"));
  } else if (!written) {
    exit_code = Fail(Status::Error(write_error));
  } else {
    PrintSummary(stats);
  }
  keeper_->Finish(keeper_->progress().pending == 0);
  if (launch_) {
    int command = targets_->WaitForCommand(status_line_);
    if (exit_code == 0) exit_code = command;
  }
  return exit_code;
}

}  // namespace

int RunRecord(const RecordOptions& options) {
  RecordSession session(options);
  return session.Run();
}

}  // namespace torchprobe
