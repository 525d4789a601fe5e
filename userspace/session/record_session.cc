// The record pipeline; see the header. Order matters for the target's sake:
// everything that can fail (discovery, privileges, the output file) is
// checked before a single probe is attached.
#include "userspace/session/record_session.h"

#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "userspace/attach/bpf_programs.h"
#include "userspace/attach/preflight.h"
#include "userspace/attach/probe_links.h"
#include "userspace/attach/uprobe_multi.h"
#include "userspace/collect/ring_reader.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/op_probes.h"
#include "userspace/discover/proc_maps.h"
#include "userspace/export/perfetto_writer.h"
#include "userspace/model/op_stack_model.h"
#include "userspace/session/proc_names.h"
#include "userspace/session/status_line.h"
#include "userspace/session/target_launcher.h"

namespace torchprobe {
namespace {

constexpr const char* kTorchLibrary = "libtorch_cpu.so";

volatile sig_atomic_t g_stop = 0;
void OnStopSignal(int) { g_stop = 1; }

void InstallStopHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;  // no SA_RESTART: poll() returns EINTR
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);
}

uint64_t NowNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int Fail(const Status& status) {
  std::fprintf(stderr, "torchprobe: %s\n", status.message().c_str());
  return 1;
}

// One ELF image of libtorch, discovered once however many processes map it.
struct ImagePlan {
  OpProbeSet probes;
  uint32_t first_op_id = 0;
};

class RecordSession : public EventHandler {
 public:
  explicit RecordSession(const RecordOptions& options) : options_(options), reader_(this) {}
  int Run();

  void OnOpEvent(const tp_op_event& event) override { model_->OnOpEvent(event); }
  void OnProcEvent(const tp_proc_event& event) override;

 private:
  Status Prepare();
  Status PlanPid(uint32_t pid);
  StatusOr<const ImagePlan*> PlanImage(const MappedImage& image);
  // `pid`: a process that maps the image; `filter_pid`: the kernel's pid
  // filter for the links, or -1 for every process (BPF filters).
  Status AttachImage(const ImagePlan& plan, const std::string& path, uint32_t pid,
                     int filter_pid);
  void AttachCatch(uint32_t pid, int filter_pid);
  Status StartLaunch();
  Status HandleLibraryLoads();
  void BeginTrace();
  // Thread exits, once the op ring holds none of the exited threads' events.
  void ApplyExits();
  bool TargetsAlive();
  void Stop();

  const RecordOptions& options_;
  bool launch_ = false;
  bool use_multi_ = true;
  std::unique_ptr<PerfettoWriter> writer_;
  std::unique_ptr<BpfPrograms> bpf_;
  std::unique_ptr<OpStackModel> model_;
  ProcNames names_;
  RingReader reader_;
  TargetLauncher launcher_;
  OpTable ops_;
  std::map<std::string, ImagePlan> images_;        // by image identity (dev:inode)
  std::vector<std::pair<uint32_t, MappedImage>> pid_images_;  // --pid mode
  std::set<std::string> attached_images_;          // launch mode: attached identities
  std::set<std::string> catch_images_;             // libstdc++ images probed for all pids
  std::vector<ProbeLinks> links_;
  ProbeLinks loader_links_;
  std::set<uint32_t> traced_;                      // processes still alive
  std::vector<uint32_t> pending_loads_;            // stopped at a library load
  std::vector<tp_proc_event> pending_exits_;       // thread exits not yet applied
  bool begun_ = false;
  uint64_t attach_ns_ = 0;
  int child_status_ = 0;
};

std::string ImageIdentity(const std::string& host_path) {
  struct stat st;
  if (stat(host_path.c_str(), &st) != 0) return host_path;
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

StatusOr<const ImagePlan*> RecordSession::PlanImage(const MappedImage& image) {
  std::string identity = ImageIdentity(image.host_path);
  auto it = images_.find(identity);
  if (it != images_.end()) return &it->second;
  StatusOr<OpProbeSet> probes = FindOpProbes(image.host_path);
  if (!probes.ok()) return probes.status();
  if (probes->probes.empty())
    return Status::Error(image.path + " has no at::_ops::*::call functions: not a libtorch build we know");
  ImagePlan plan;
  plan.first_op_id = static_cast<uint32_t>(ops_.size());
  for (const OpProbe& probe : probes->probes) ops_.push_back(probe.op);
  plan.probes = std::move(*probes);
  return &images_.emplace(identity, std::move(plan)).first->second;
}

Status RecordSession::PlanPid(uint32_t pid) {
  StatusOr<MappedImage> image = FindMappedImage(pid, kTorchLibrary);
  if (!image.ok()) return image.status();
  StatusOr<const ImagePlan*> plan = PlanImage(*image);
  if (!plan.ok()) return plan.status();
  pid_images_.emplace_back(pid, *image);
  return Status::Ok();
}

Status RecordSession::Prepare() {
  launch_ = !options_.command.empty();
  Status status = CheckPrivileges();
  if (!status.ok()) return status;
  use_multi_ = options_.attach != "uprobe" && HaveUprobeMulti();
  if (options_.attach == "multi" && !use_multi_)
    return Status::Error("--attach multi: this kernel has no uprobe_multi links");
  status = CheckUprobeSupport(options_.attach != "uprobe");
  if (!status.ok()) return status;
  for (uint32_t pid : options_.pids) {
    status = PlanPid(pid);
    if (!status.ok()) return status;
  }
  std::string error;
  writer_ = PerfettoWriter::Open(options_.output, &error);
  if (!writer_) return Status::Error(error);

  BpfConfig config;
  config.use_uprobe_multi = use_multi_;
  config.empty_programs = options_.empty_probes;
  config.empty_uretprobes = options_.empty_uretprobes;
  config.filter_pids = launch_;  // --pid mode: the kernel filters each link by pid
  config.follow_forks = launch_;
  config.watch_loads = launch_;
  config.ring_bytes = options_.ring_mb << 20;
  StatusOr<std::unique_ptr<BpfPrograms>> bpf = BpfPrograms::Load(config);
  if (!bpf.ok()) return bpf.status();
  bpf_ = std::move(*bpf);
  model_ = std::make_unique<OpStackModel>(writer_.get(), &names_);
  return reader_.Open(bpf_->events_fd(), bpf_->ctl_events_fd());
}

void RecordSession::BeginTrace() {
  if (begun_) return;
  begun_ = true;
  ClockSnapshot clock;
  clock.boottime_ns = NowNs(CLOCK_BOOTTIME);
  clock.monotonic_ns = NowNs(CLOCK_MONOTONIC);
  writer_->Begin(ops_, clock);
}

Status RecordSession::AttachImage(const ImagePlan& plan, const std::string& path,
                                  uint32_t pid, int filter_pid) {
  ProbeTarget entries, returns;
  entries.path = returns.path = path;
  entries.pid = returns.pid = filter_pid;
  for (size_t i = 0; i < plan.probes.probes.size(); ++i) {
    const OpProbe& probe = plan.probes.probes[i];
    uint64_t op_id = plan.first_op_id + i;
    entries.offsets.push_back(probe.file_offset);
    entries.cookies.push_back(op_id);
    for (uint64_t offset : probe.return_offsets) {
      returns.offsets.push_back(offset);
      returns.cookies.push_back(op_id);
    }
  }
  if (options_.empty_uretprobes) {  // bench: the uretprobe floor, on the entries
    returns.offsets = entries.offsets;
    returns.cookies = entries.cookies;
    returns.retprobe = true;
  }
  uint64_t start = NowNs(CLOCK_MONOTONIC);
  StatusOr<ProbeLinks> links = ProbeLinks::Attach(bpf_->op_entry(), entries, bpf_->op_return(),
                                                  &returns, use_multi_);
  if (!links.ok()) return links.status();
  uint64_t live = NowNs(CLOCK_MONOTONIC);
  attach_ns_ += live - start;
  if (model_->start_ns() == 0) model_->SetStart(live);
  TraceStats& stats = model_->stats();
  stats.probed_symbols += plan.probes.probes.size();
  stats.unresolved_symbols += plan.probes.unresolved;
  stats.without_returns += plan.probes.without_returns;
  links_.push_back(std::move(*links));
  AttachCatch(pid, filter_pid);
  return Status::Ok();
}

void RecordSession::AttachCatch(uint32_t pid, int filter_pid) {
  // Ops that a caught C++ exception unwound are closed where it was caught.
  // Without this probe they are closed by the thread's next op, later.
  if (!bpf_->on_catch()) return;
  StatusOr<MappedImage> runtime = FindMappedImage(pid, "libstdc++.so");
  if (!runtime.ok()) return;
  std::string identity = ImageIdentity(runtime->host_path);
  if (filter_pid < 0 && !catch_images_.insert(identity).second) return;
  StatusOr<uint64_t> offset = FindFunctionOffset(runtime->host_path, "__cxa_begin_catch");
  if (!offset.ok()) return;
  ProbeTarget target;
  target.path = runtime->host_path;
  target.pid = filter_pid;
  target.offsets = {*offset};
  target.cookies = {0};
  StatusOr<ProbeLinks> links =
      ProbeLinks::Attach(bpf_->on_catch(), target, nullptr, nullptr, use_multi_);
  if (links.ok()) {
    links_.push_back(std::move(*links));
    ++model_->stats().catch_probes;
  }
}

Status RecordSession::StartLaunch() {
  // Stop the command at each library load until libtorch is attached, so
  // its first op is seen (the probe is on the dynamic loader's hook).
  StatusOr<MappedImage> loader = FindMappedImage(getpid(), "ld-linux");
  if (!loader.ok()) return Status::Error("cannot find the dynamic loader: " + loader.status().message());
  StatusOr<uint64_t> hook = FindFunctionOffset(loader->host_path, "_dl_debug_state");
  if (!hook.ok()) return hook.status();
  Status status = launcher_.Fork(options_.command);
  if (!status.ok()) return status;
  uint32_t child = static_cast<uint32_t>(launcher_.pid());
  status = bpf_->AddPid(child);
  if (!status.ok()) return status;
  traced_.insert(child);
  bpf_->SetStopOnLoad(true);
  ProbeTarget target;
  target.path = loader->host_path;
  target.offsets = {*hook};
  target.cookies = {0};
  StatusOr<ProbeLinks> links =
      ProbeLinks::Attach(bpf_->dl_state(), target, nullptr, nullptr, use_multi_);
  if (!links.ok()) return links.status();
  loader_links_ = std::move(*links);
  return launcher_.Release();
}

Status RecordSession::HandleLibraryLoads() {
  std::vector<uint32_t> loads;
  loads.swap(pending_loads_);
  Status result = Status::Ok();
  for (uint32_t pid : loads) {
    StatusOr<MappedImage> image = FindMappedImage(pid, kTorchLibrary);
    std::string identity = image.ok() ? ImageIdentity(image->host_path) : "";
    if (image.ok() && result.ok() && !attached_images_.count(identity)) {
      StatusOr<const ImagePlan*> plan = PlanImage(*image);
      if (plan.ok()) {
        BeginTrace();
        result = AttachImage(**plan, image->host_path, pid, -1);  // every traced process; BPF filters
        attached_images_.insert(identity);
        bpf_->SetStopOnLoad(false);
      } else {
        result = plan.status();
      }
    }
    kill(static_cast<pid_t>(pid), SIGCONT);  // always: never leave the target stopped
  }
  return result;
}

void RecordSession::OnProcEvent(const tp_proc_event& event) {
  switch (event.hdr.type) {
    case EV_PROC_EXIT:
      // Its last op events may still be in the op ring: see ApplyExits().
      pending_exits_.push_back(event);
      break;
    case EV_PROC_FORK:
      traced_.insert(event.child_pid);
      break;
    case EV_LIB_LOAD:
      pending_loads_.push_back(event.hdr.pid);
      break;
  }
}

void RecordSession::ApplyExits() {
  for (const tp_proc_event& exit : pending_exits_)
    model_->OnThreadExit(exit.hdr.pid, exit.hdr.tid, exit.hdr.ts_ns, exit.comm);
  pending_exits_.clear();
}

bool RecordSession::TargetsAlive() {
  if (launch_ && !launcher_.Exited(&child_status_)) return true;
  for (auto it = traced_.begin(); it != traced_.end();) {
    if (IsProcessAlive(*it)) return true;
    bpf_->RemovePid(*it);
    it = traced_.erase(it);
  }
  return false;
}

void RecordSession::Stop() {
  // Entries first: every op seen entering can still be seen returning.
  // Detach time counts closing links only, not the drain between them.
  uint64_t start = NowNs(CLOCK_MONOTONIC);
  model_->SetStop(start);
  for (ProbeLinks& links : links_) links.DetachEntries();
  uint64_t detach_ns = NowNs(CLOCK_MONOTONIC) - start;
  reader_.DrainAll();
  start = NowNs(CLOCK_MONOTONIC);
  for (ProbeLinks& links : links_) links.DetachAll();
  loader_links_.DetachAll();
  model_->stats().detach_ns = detach_ns + NowNs(CLOCK_MONOTONIC) - start;
  reader_.DrainAll();
  ApplyExits();
  // A launched command stopped at a library load must go on.
  HandleLibraryLoads();
}

int RecordSession::Run() {
  InstallStopHandlers();
  Status status = Prepare();
  if (!status.ok()) return Fail(status);
  if (launch_) {
    status = StartLaunch();
    if (!status.ok()) return Fail(status);
  } else {
    BeginTrace();
    for (auto& [pid, image] : pid_images_) {
      traced_.insert(pid);
      status = bpf_->AddPid(pid);  // for thread exits
      if (status.ok())
        status = AttachImage(**PlanImage(image), image.host_path, pid, static_cast<int>(pid));
      if (!status.ok()) return Fail(status);
    }
  }
  StatusLine status_line(options_.quiet);
  uint64_t start = NowNs(CLOCK_MONOTONIC);
  uint64_t deadline = options_.duration_s > 0
                          ? start + static_cast<uint64_t>(options_.duration_s * 1e9) : 0;
  while (!g_stop) {
    bool more = false;
    status = reader_.Poll(options_.drain_ms, &more);
    if (!more) ApplyExits();
    if (status.ok()) status = HandleLibraryLoads();
    if (!status.ok()) {
      Stop();
      return Fail(status);
    }
    uint64_t now = NowNs(CLOCK_MONOTONIC);
    if (deadline && now >= deadline) break;
    if (!TargetsAlive()) break;
    status_line.Update(now, model_->stats().events,
                       bpf_->Drops(DROP_RINGBUF_FULL) + bpf_->Drops(DROP_CTL_FULL));
  }
  status_line.Clear();
  Stop();
  if (launch_ && !begun_)
    return Fail(Status::Error("the command never loaded " + std::string(kTorchLibrary) +
                              ": not a PyTorch program, nothing traced"));
  TraceStats& stats = model_->stats();
  model_->FinishThreads(NowNs(CLOCK_MONOTONIC));
  stats.dropped_events = bpf_->Drops(DROP_RINGBUF_FULL) + bpf_->Drops(DROP_CTL_FULL);
  stats.unknown_events = reader_.stats().unknown + reader_.stats().malformed;
  stats.attach_mode = use_multi_ ? "uprobe_multi" : "uprobe";
  stats.attach_ns = attach_ns_;
  std::string error;
  if (!writer_->Finish(stats, &error)) return Fail(Status::Error(error));
  if (!options_.quiet) {
    std::fprintf(stderr,
                 "torchprobe: wrote %s: %" PRIu64 " op events, %" PRIu64 " dropped, %" PRIu64
                 " slices repaired (begin %" PRIu64 ", end %" PRIu64 "), %" PRIu64
                 " of %" PRIu64 " op symbols unresolved; %s attach %.1f ms, detach %.1f ms\n",
                 options_.output.c_str(), stats.events, stats.dropped_events,
                 stats.begin_repaired + stats.end_repaired, stats.begin_repaired,
                 stats.end_repaired, stats.unresolved_symbols, stats.probed_symbols,
                 stats.attach_mode.c_str(), stats.attach_ns / 1e6, stats.detach_ns / 1e6);
  }
  return 0;
}

}  // namespace

int RunRecord(const RecordOptions& options) {
  RecordSession session(options);
  return session.Run();
}

}  // namespace torchprobe
