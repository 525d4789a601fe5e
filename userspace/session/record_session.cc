// The record pipeline; see the header. Order matters for the target's sake:
// everything that can fail (discovery, privileges, the output file) is
// checked before a single probe is attached, and every link belongs to the
// keeper, so the probes come off however torchprobe ends.
//
// Targets: the processes the user named (--pid) or launched, and, unless
// --no-children, the processes they fork. Attached by pid, each target gets
// its own links, filtered by the kernel, so other PyTorch processes on the
// host never trap; a target that has not loaded libtorch yet (--wait, or a
// child that exec'd a new program) is watched at its dynamic loader. In
// launch mode the command is held at each library load (one loader probe
// for every process, BPF filters by pid) until its own links are live.
//
// Returns: uretprobes where the keeper can guard the target's exceptions
// (return_fixer.h), else a uprobe on every `ret` (--returns). The guard goes
// on every target that can have it, whatever its own route: the kernel keeps
// one uprobe per function for all its users and, on each hit, prepares the
// return for every user that has a return handler, whichever process its
// filter names. So another run's uretprobes on the same libtorch (another
// torchprobe's, on another process) put trampolines on a `ret`-route
// target's stack too, and its first C++ exception through one would end it
// in std::terminate. The guard takes them off like ours.
//
// Stopping: the BPF gate first lets only the returns of open ops through,
// then nothing; the trace is written then, and the probes are removed after,
// by the keeper, hottest first (per-symbol probes take ~50 ms each).
#include "userspace/session/record_session.h"
#include "userspace/base/counted.h"

#include <bpf/libbpf.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "userspace/attach/bpf_programs.h"
#include "userspace/base/clock.h"
#include "userspace/attach/preflight.h"
#include "userspace/attach/probe_cost.h"
#include "userspace/attach/probe_keeper.h"
#include "userspace/attach/probe_links.h"
#include "userspace/attach/uprobe_multi.h"
#include "userspace/collect/ring_reader.h"
#include "userspace/discover/collective_probes.h"
#include "userspace/discover/cuda_probes.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/op_probes.h"
#include "userspace/base/proc_maps.h"
#include "userspace/discover/tensor_args.h"
#include "userspace/discover/py_node.h"
#include "userspace/discover/unwinder_probes.h"
#include "userspace/export/perfetto_writer.h"
#include "userspace/export/trace_fanout.h"
#include "userspace/model/boxed_model.h"
#include "userspace/discover/address_symbols.h"
#include "userspace/discover/autograd_probes.h"
#include "userspace/model/autograd_model.h"
#include "userspace/model/op_stack_model.h"
#include "userspace/model/step_slicer.h"
#include "userspace/session/probe_sets.h"
#include "userspace/session/probe_calibration.h"
#include "userspace/session/proc_names.h"
#include "userspace/session/record_signals.h"
#include "userspace/session/run_summary.h"
#include "userspace/session/status_line.h"
#include "userspace/session/step_windows.h"
#include "userspace/session/target_launcher.h"
#include "userspace/session/trace_outputs.h"

namespace torchprobe {
namespace {

constexpr const char* kTorchLibrary = "libtorch_cpu.so";

// The images whose functions are probed, each with its probe plan: libtorch
// first (ATen ops and c10d collectives: a process is traced once it maps
// it), then the libraries traced alongside it when mapped.
struct ProbeImage {
  const char* library;  // basename prefix in /proc/PID/maps
  StatusOr<OpProbeSet> (*find)(const std::string& path);
  const char* entry = "op_enter";  // the program at function entry (BpfPrograms::Program)
};
constexpr ProbeImage kProbeImages[] = {
    {kTorchLibrary, FindOpProbes},
    {"libgloo.so", FindGlooProbes},  // collectives' communication, on Gloo's threads
    {"libtorch_python.so", FindPyNodeProbes},  // Python Functions' autograd nodes (PyNode::apply)
    // CUDA calls, with their arguments (stream, sizes, kernel).
    {"libcudart.so", FindCudaProbes, "cuda_enter"},  // runtime: launches, copies, waits
    {"libcuda.so", FindCudaProbes, "cuda_enter"},    // driver: JIT kernels' launches
    {"libnccl.so", FindCudaProbes, "cuda_enter"},    // NCCL, inside c10d's calls
};
constexpr const char* kLoader = "ld-linux";
constexpr uint64_t kSecond = 1'000'000'000;

int Fail(const Status& status) {
  std::fprintf(stderr, "torchprobe: %s\n", status.message().c_str());
  return 1;
}

// Per-symbol uprobes take one descriptor each (~12k for PyTorch 1.13).
void RaiseFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}


// One ELF image of libtorch, discovered once however many processes map it.
struct ImagePlan {
  OpProbeSet probes;
  uint32_t first_op_id = 0;
  const ProbeImage* kind = &kProbeImages[0];
};

// A process torchprobe traces or waits for.
struct Target {
  uint32_t pid = 0;
  std::string role;           // "" (named by the user or launched), "child of P"
  std::string image;          // identity of the libtorch attached for it
  std::string image_path;     // ... and its host path
  std::string loader;         // identity of the dynamic loader watched for it
  std::set<std::string> extra_images;  // identities of the other probe images attached
  ProbeLinks ops, catcher, loads;  // this process' own links
  ProbeLinks guard;                // uretprobe returns: on its unwinder
  bool guarded = false;            // the keeper guards its returns (uretprobes)
  std::vector<ProbeLinks> extra;   // ... on the other probe images
  bool attach_pending = false;     // forked: attached at the next turn
  bool exited = false;
  uint64_t forked_ns = 0;          // a child: its fork (the event's time), until its links are live
};

// A fork of a traced process, as BPF saw it.
struct ForkEvent {
  uint32_t parent = 0;
  uint32_t child = 0;
  bool held = false;  // stopped before its first instruction: resume once attached
  uint64_t ts_ns = 0;
};

class RecordSession {
 public:
  explicit RecordSession(const RecordOptions& options) : options_(options), reader_(&router_) {}
  int Run();

 private:
  // Every event type to its handlers: the session's own (ops, processes),
  // and each probe set's (probe_set.h).
  void RouteEvents();
  void OnProcEvent(const tp_proc_event& event);
  Status Prepare();
  StatusOr<const ImagePlan*> PlanImage(const MappedImage& image, const std::string& identity,
                                       const ProbeImage& kind = kProbeImages[0]);
  Target& AddTarget(uint32_t pid, std::string role);
  // Attaches `t` to the libtorch it maps, or watches its loader if it maps
  // none yet. --pid mode.
  Status AttachTarget(Target& t);
  // ... its ops (first the catch probe and the returns' guard): sets
  // t.image once attached; a short-lived child gone meanwhile is not an error.
  Status AttachOpsOf(Target& t, const MappedImage& image, const std::string& identity,
                     const ImagePlan& plan);
  // A process' dynamic loader, where library loads are watched.
  struct Loader {
    std::string host_path;
    std::string identity;
  };
  std::optional<Loader> FindLoader(uint32_t pid);
  StatusOr<ProbeLinks> AttachLoader(const Loader& loader, int pid);
  // libstdc++'s __cxa_begin_catch for `pid`'s runtime, probed for
  // `filter_pid` (-1: every process); empty links when there is none.
  ProbeLinks AttachCatch(uint32_t pid, int filter_pid);
  void WatchLoads(Target& t);
  // Uretprobe returns for `t`, if the keeper can guard its exceptions;
  // false (said once, counted) when `ret` probes must do.
  StatusOr<bool> GuardReturns(Target& t);
  // The probe images after libtorch, once (a library load may bring one).
  Status AttachExtraImages(Target& t);
  // The probe sets beside the ops, once `t`'s libtorch is attached.
  Status AttachProbeSets(Target& t);
  // Probe links on `path` for `pid` (-1: every process, BPF filters).
  StatusOr<ProbeLinks> AttachOps(const ImagePlan& plan, const std::string& path, int pid,
                                 bool uretprobes);
  StatusOr<ProbeLinks> AttachOne(bpf_program* prog, const std::string& path, const char* symbol,
                                 int pid);
  // Drops `t`'s links on the images of its program (an exec replaced it).
  void ReleaseImages(Target& t);
  // ... and its loader watch: it is gone.
  void ReleaseTarget(Target& t);
  Status StartLaunch();
  // Launch mode: a process of the command loaded a library (stopped) or
  // exec'd a program that may use another loader.
  Status OnLaunchLoad(uint32_t pid);
  void OnLaunchExec(uint32_t pid);
  Status HandleProcessEvents();
  void ResumeHeld();
  void BeginTrace();
  // Thread exits, once the op ring holds none of the exited threads' events.
  void ApplyExits();
  bool TargetsAlive();
  // Ends capture into the model: returns of open ops drain, then the gate shuts.
  void CloseGate();
  void StopRecording();
  void RemoveProbes();
  int WaitForCommand();
  void PrintSummary(const TraceStats& stats);
  // The probes' own cost, measured on a child of torchprobe beside the
  // attach (probe_cost.h), and put in the stats of every output.
  void StartCalibration();
  // The counts the model cannot know, into its stats before a Finish.
  void FillStats(TraceStats& stats);
  // The outputs and the models that feed them (steps, boxed calls, the
  // probe sets'): at the start, and again for each capture window,
  // which gets fresh outputs and a fresh op model.
  void WireModels(std::unique_ptr<TraceFanout> outputs);
  // Capture windows (WindowSchedule): gate the probes open into fresh
  // outputs, or closed with this window's files written and the next
  // window's opened.
  void OpenWindow(uint64_t now);
  Status CloseWindow();
  Status FollowSchedule(WindowSchedule& schedule, int* toggles_seen);

  const RecordOptions& options_;
  bool launch_ = false;
  bool use_multi_ = true;
  std::unique_ptr<ProbeKeeper> keeper_;
  std::unique_ptr<TraceFanout> writer_;  // every output file
  std::unique_ptr<StepSlicer> steps_;     // between the model and the outputs
  std::unique_ptr<StepWindows> step_windows_;  // --steps: between steps_ and the outputs
  TraceSink* sink_ = nullptr;             // what the model hands its slices to: steps_
  std::unique_ptr<BpfPrograms> bpf_;
  std::unique_ptr<OpStackModel> model_;
  std::unique_ptr<BoxedModel> boxed_;  // in front of model_: names boxed calls
  std::vector<std::unique_ptr<ProbeSet>> sets_;  // beside the ops (probe_sets.h)
  std::unique_ptr<AutogradModel> autograd_;  // in front of boxed_: names the engine's calls
  AddressSymbols vtable_symbols_{true};      // autograd nodes' vtables -> their classes
  ProcNames names_;
  EventRouter router_;
  RingReader reader_;
  TargetLauncher launcher_;
  StatusLine status_line_{false};
  OpTable ops_;
  std::map<std::string, ImagePlan> images_;   // by image identity (dev:inode)
  std::map<uint32_t, Target> targets_;        // by pid
  std::set<std::string> launch_loaders_;      // launch mode: loaders watched for all
  std::vector<ProbeLinks> launch_links_;      // launch mode: links for every process
  std::vector<uint32_t> pending_loads_;
  std::vector<uint32_t> pending_execs_;
  std::vector<ForkEvent> pending_forks_;
  std::vector<tp_proc_event> pending_exits_;  // thread exits not yet applied
  bool begun_ = false;
  std::string uret_unavailable_;  // why no process can have uretprobe returns
  uint64_t attach_ns_ = 0;
  ProbeCalibration calibration_;
  int command_status_ = -1;  // wait status once reaped
  bool window_open_ = true;  // the probes' gate is open into writer_ and model_
  int64_t window_slot_ = 0;  // WindowSchedule slot of the window open or last open
  int64_t windows_ = 0;      // windows closed so far
  uint64_t events_before_ = 0;  // op events of the windows closed so far
};

StatusOr<const ImagePlan*> RecordSession::PlanImage(const MappedImage& image,
                                                    const std::string& identity,
                                                    const ProbeImage& kind) {
  auto it = images_.find(identity);
  if (it != images_.end()) return &it->second;
  StatusOr<OpProbeSet> probes = kind.find(image.host_path);
  if (!probes.ok()) return probes.status();
  if (probes->probes.empty() && &kind == &kProbeImages[0])
    return Status::Error(image.path + " has no at::_ops::*::call functions: not a libtorch build we know");
  ImagePlan plan;
  plan.first_op_id = static_cast<uint32_t>(ops_.size());
  plan.kind = &kind;
  for (const OpProbe& probe : probes->probes) {
    if (probe.boxed) boxed_->AddCopy(static_cast<uint32_t>(ops_.size()));
    ops_.push_back(probe.op);
  }
  plan.probes = std::move(*probes);
  TraceStats& stats = model_->stats();
  stats.unresolved_symbols += plan.probes.unresolved;
  stats.without_returns += plan.probes.without_returns;
  if (begun_) sink_->AddOps(ops_);
  return &images_.emplace(identity, std::move(plan)).first->second;
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
  if (!use_multi_) RaiseFileLimit();
  WindowSchedule schedule(options_.windows, 0);
  window_open_ = schedule.Slot(0) != WindowSchedule::kClosed;
  StatusOr<std::unique_ptr<TraceFanout>> outputs = OpenTraceOutputs(options_, schedule.numbered() ? 0 : -1);
  if (!outputs.ok()) return outputs.status();
  StatusOr<std::vector<std::unique_ptr<ProbeSet>>> sets = MakeProbeSets(options_, &ops_);
  if (!sets.ok()) return sets.status();
  sets_ = std::move(*sets);
  WireModels(std::move(*outputs));
  RouteEvents();
  // Plan every named process before anything is loaded: a wrong pid is one
  // line and nothing attached.
  for (uint32_t pid : options_.pids) {
    StatusOr<MappedImage> image = FindMappedImage(pid, kTorchLibrary);
    if (!image.ok()) {
      if (!options_.wait || !IsProcessAlive(pid)) return image.status();
      continue;  // --wait: attached when it loads libtorch
    }
    StatusOr<const ImagePlan*> plan = PlanImage(*image, ImageIdentity(image->host_path));
    if (!plan.ok()) return plan.status();
  }

  BpfConfig config;
  config.use_uprobe_multi = use_multi_;
  config.empty_programs = options_.empty_probes;
  config.empty_uretprobes = options_.empty_uretprobes;
  config.filter_pids = launch_;  // --pid mode: the kernel filters each link by pid
  config.follow_forks = options_.follow_children;
  config.hold_forks = options_.follow_children && options_.hold_children;
  config.watch_loads = true;
  config.ring_bytes = uint64_t{options_.ring_mb} << 20;
  // The guard's programs load in `ret` mode too (see the top of this file).
  config.uretprobe_returns = use_multi_ && !options_.empty_probes;
  for (const auto& set : sets_) set->Configure(config);
  if (options_.returns == "uretprobe" && !use_multi_)
    return Status::Error("--returns uretprobe: needs uprobe_multi links (kernel 6.6+, not --attach uprobe)");
  if (!use_multi_) uret_unavailable_ = "per-symbol uprobes (no uprobe_multi)";
  StatusOr<std::unique_ptr<BpfPrograms>> bpf = BpfPrograms::Load(config);
  if (!bpf.ok() && config.uretprobe_returns && options_.returns != "uretprobe") {
    // A kernel whose uretprobe bookkeeping we cannot read: `ret` probes.
    uret_unavailable_ = "its BPF programs do not load here (" + bpf.status().message() + ")";
    config.uretprobe_returns = false;
    bpf = BpfPrograms::Load(config);
  }
  if (!bpf.ok()) return bpf.status();
  bpf_ = std::move(*bpf);
  for (auto& set : sets_) set->SetContext({bpf_.get(), keeper_.get(), use_multi_});
  if (!window_open_) bpf_->SetGate(GATE_CLOSED);  // --start-after: nothing yet
  keeper_->SetMaps(bpf_->ctl_fd(), bpf_->held_fd(), bpf_->gated_hits_fd());
  if (bpf_->Program("op_uret")) keeper_->SetReturnFixing(bpf_->fixes_fd(), bpf_->list_returns_fd());
  // Attached by pid, a target's library loads are watched (--wait, children
  // that exec); launch mode holds the command at each load instead.
  if (!launch_) bpf_->SetLoads(LOADS_WATCH);
  return reader_.Open(bpf_->events_fd(), bpf_->ctl_events_fd());
}

void RecordSession::RouteEvents() {
  auto op_entry = [this](const tp_op_event& event) { autograd_->OnOpEvent(EventRouter::EntryOf(event)); };
  router_.On<tp_op_event>({EV_OP_ENTER, EV_OP_EXIT, EV_OP_UNWIND, EV_OP_RESTORED},
                          [this](const tp_op_event& event) { autograd_->OnOpEvent(event); });
  router_.On<tp_boxed_event>({EV_BOXED_ENTER}, [this](const tp_boxed_event& event) { boxed_->OnBoxedEvent(event); });
  // The autograd engine's calls, named by their node: an op's entry.
  router_.On<tp_autograd_node_event>({EV_AUTOGRAD_NODE},
                                     [this](const tp_autograd_node_event& event) { autograd_->OnNodeEntry(event); });
  router_.On<tp_proc_event>({EV_LIB_LOAD, EV_PROC_FORK, EV_PROC_EXEC, EV_PROC_EXIT},
                            [this](const tp_proc_event& event) { OnProcEvent(event); });
  // Entries that carry more: the entry opens the op's slice before the sets
  // fill it (shapes), or after they took the call's arguments (CUDA calls,
  // collectives: the innermost op is then the caller).
  router_.On<tp_op_shapes_event>({EV_OP_SHAPES}, [op_entry](const tp_op_shapes_event& event) { op_entry(event.op); });
  for (auto& set : sets_) set->Route(router_);
  router_.On<tp_cuda_call_event>({EV_CUDA_CALL}, [op_entry](const tp_cuda_call_event& event) { op_entry(event.op); });
  router_.On<tp_collective_event>({EV_COLLECTIVE},
                                  [op_entry](const tp_collective_event& event) { op_entry(event.op); });
}

void RecordSession::BeginTrace() {
  if (begun_) return;
  begun_ = true;
  ClockSnapshot clock;
  clock.boottime_ns = NowNs(CLOCK_BOOTTIME);
  clock.monotonic_ns = NowNs(CLOCK_MONOTONIC);
  sink_->Begin(ops_, clock);
}

StatusOr<ProbeLinks> RecordSession::AttachOps(const ImagePlan& plan, const std::string& path,
                                              int pid, bool uretprobes) {
  ProbeTarget entries, returns, boxed, collectives, nodes;
  for (ProbeTarget* t : {&entries, &returns, &boxed, &collectives, &nodes}) {
    t->path = path;
    t->pid = pid;
  }
  bpf_program* shapes_entry = plan.kind == &kProbeImages[0] ? bpf_->Program("shapes_enter") : nullptr;  // --shapes
  for (size_t i = 0; i < plan.probes.probes.size(); ++i) {
    const OpProbe& probe = plan.probes.probes[i];
    uint64_t op_id = plan.first_op_id + i;
    // The cookie is the op id; what an entry program reads the op's
    // arguments with goes into op_layouts (bpf/events.h tp_op_layout).
    tp_op_layout layout = {};
    ProbeTarget* target = &entries;
    if (probe.boxed) {  // its entry program finds the handle at arg0 + handle_offset
      target = &boxed;
      layout.handle_offset = probe.handle_offset;
    } else if (probe.collective_layout == kAutogradNodeEntry) {  // named by its node (bpf/autograd.bpf.c)
      target = &nodes;
      layout.node_object_offset = probe.node_object_offset;
    } else if (probe.collective_layout) {  // with its group and tensors (bpf/collectives.bpf.c)
      target = &collectives;
      layout.collective = static_cast<uint8_t>(probe.collective_layout);
      layout.group_rank_offset = probe.group_rank_offset;
      layout.tensor_numel_offset = probe.tensor_numel_offset;
    } else if (shapes_entry) {  // --shapes: where its Tensor arguments are, for shapes_enter
      uint32_t places = TensorPlaceCookieOf(probe.symbol.c_str(), probe.op.schema);
      for (int t = 0; t < TP_SHAPES_TENSORS; ++t) layout.tensor_places[t] = static_cast<uint8_t>(places >> (8 * t));
    }
    if (target != &entries || shapes_entry) {
      Status status = bpf_->SetOpLayout(static_cast<uint32_t>(op_id), layout);
      if (!status.ok()) return status;
    }
    target->offsets.push_back(probe.file_offset);
    target->cookies.push_back(op_id);
    for (uint64_t offset : probe.return_offsets) {
      returns.offsets.push_back(offset);
      returns.cookies.push_back(probe.tail_returns ? op_id | TP_COOKIE_SHARED_RET : op_id);
    }
  }
  bpf_program* on_return = bpf_->Program("op_return");
  if (uretprobes || options_.empty_uretprobes) {  // on the entries (bench: the uretprobe floor)
    returns.offsets = entries.offsets;
    returns.cookies = entries.cookies;
    for (const ProbeTarget* more : {&boxed, &collectives, &nodes}) {
      returns.offsets.insert(returns.offsets.end(), more->offsets.begin(), more->offsets.end());
      returns.cookies.insert(returns.cookies.end(), more->cookies.begin(), more->cookies.end());
    }
    returns.retprobe = true;
    if (uretprobes) on_return = bpf_->Program("op_uret");
  }
  BeginTrace();
  uint64_t start = NowNs();
  bpf_program* on_entry = shapes_entry ? shapes_entry : bpf_->Program(plan.kind->entry);
  StatusOr<ProbeLinks> links = ProbeLinks::Attach(on_entry, entries, on_return,
                                                  &returns, use_multi_, keeper_.get());
  if (!links.ok()) return links.status();
  Status boxed_status = links->AddEntries(bpf_->Program("boxed_enter"), boxed, use_multi_);
  if (!boxed_status.ok()) return boxed_status;
  Status collective_status = links->AddEntries(bpf_->Program("collective_enter"), collectives, use_multi_);
  if (!collective_status.ok()) return collective_status;
  Status node_status = links->AddEntries(bpf_->Program("autograd_enter"), nodes, use_multi_);
  if (!node_status.ok()) return node_status;
  uint64_t live = NowNs();
  attach_ns_ += live - start;
  if (model_->start_ns() == 0) model_->SetStart(live);
  model_->stats().probed_symbols += plan.probes.probes.size();
  return links;
}

StatusOr<ProbeLinks> RecordSession::AttachOne(bpf_program* prog, const std::string& path,
                                              const char* symbol, int pid) {
  StatusOr<uint64_t> offset = FindFunctionOffset(path, symbol);
  if (!offset.ok()) return offset.status();
  ProbeTarget target;
  target.path = path;
  target.pid = pid;
  target.offsets = {*offset};
  target.cookies = {0};
  target.op_cookies = false;  // removed first: one probe, hit often
  return ProbeLinks::Attach(prog, target, nullptr, nullptr, use_multi_, keeper_.get());
}

Target& RecordSession::AddTarget(uint32_t pid, std::string role) {
  Target& t = targets_[pid];
  if (t.pid == 0) {
    t.pid = pid;
    t.role = std::move(role);
    if (!t.role.empty()) names_.SetRole(pid, t.role);
    bpf_->AddPid(pid);  // forks, execs and exits are seen for it
    for (auto& set : sets_) set->Follow(pid, 0);  // a fork's was followed at its event
  }
  return t;
}

std::optional<RecordSession::Loader> RecordSession::FindLoader(uint32_t pid) {
  StatusOr<MappedImage> loader = FindMappedImage(pid, kLoader);
  if (!loader.ok()) return std::nullopt;  // a static program: it cannot dlopen libtorch
  std::string identity = ImageIdentity(loader->host_path);
  if (identity.empty()) return std::nullopt;  // gone meanwhile
  return Loader{loader->host_path, identity};
}

StatusOr<ProbeLinks> RecordSession::AttachLoader(const Loader& loader, int pid) {
  return AttachOne(bpf_->Program("dl_state"), loader.host_path, "_dl_debug_state", pid);
}

ProbeLinks RecordSession::AttachCatch(uint32_t pid, int filter_pid) {
  if (!bpf_->Program("on_catch")) return ProbeLinks();
  StatusOr<MappedImage> runtime = FindMappedImage(pid, "libstdc++.so");
  if (!runtime.ok()) return ProbeLinks();
  StatusOr<ProbeLinks> links =
      AttachOne(bpf_->Program("on_catch"), runtime->host_path, "__cxa_begin_catch", filter_pid);
  if (!links.ok()) return ProbeLinks();  // unwound ops are then closed by the next op
  ++model_->stats().catch_probes;
  return std::move(*links);
}

void RecordSession::WatchLoads(Target& t) {
  std::optional<Loader> loader = FindLoader(t.pid);
  if (!loader || loader->identity == t.loader) return;
  StatusOr<ProbeLinks> links = AttachLoader(*loader, static_cast<int>(t.pid));
  if (!links.ok()) return;  // it is gone, or the loader has no such symbol: not traced
  t.loads = std::move(*links);
  t.loader = loader->identity;
}

StatusOr<bool> RecordSession::GuardReturns(Target& t) {
  const bool want_uretprobes = options_.returns != "ret";
  if (t.guarded) return want_uretprobes;
  if (!IsProcessAlive(t.pid)) return false;  // gone: its links will fail and say so
  std::string why = uret_unavailable_;
  if (why.empty() && !bpf_->Program("op_uret")) why = "its BPF programs are not loaded";
  std::optional<UnwinderProbes> unwinder;
  if (why.empty()) {
    StatusOr<UnwinderProbes> found = FindUnwinderProbes(t.pid);
    if (found.ok()) unwinder = std::move(*found);
    else why = found.status().message();
  }
  // The tracer first, then the unwinder probe: no throw may find a
  // trampoline that no one will take off.
  if (why.empty()) {
    keeper_->SetGuardProbe(unwinder->host_path, unwinder->offsets, bpf_program__fd(bpf_->Program("on_throw")));
    why = keeper_->GuardReturns(static_cast<pid_t>(t.pid));
  }
  if (!why.empty() && !IsProcessAlive(t.pid)) return false;
  if (why.empty()) {
    ProbeTarget target;
    target.path = unwinder->host_path;
    target.offsets = unwinder->offsets;
    target.cookies.assign(target.offsets.size(), 0);
    target.pid = static_cast<int>(t.pid);
    target.op_cookies = false;
    target.guards_returns = true;
    StatusOr<ProbeLinks> links =
        ProbeLinks::Attach(bpf_->Program("on_throw"), target, nullptr, nullptr, use_multi_, keeper_.get());
    if (links.ok()) {
      t.guard = std::move(*links);
      t.guarded = true;
      if (!want_uretprobes) {
        model_->ReturnsThroughRet(t.pid);
        return false;
      }
      ++model_->stats().uretprobe_processes;
      return true;
    }
    keeper_->ReleaseReturns(static_cast<pid_t>(t.pid));
    why = links.status().message();
  }
  if (options_.returns == "uretprobe")
    return Status::Error("--returns uretprobe: process " + std::to_string(t.pid) + ": " + why);
  if (!want_uretprobes) return false;  // asked for: not a fallback; unguarded where it cannot be
  ++model_->stats().ret_fallbacks;
  if (!options_.quiet)
    std::fprintf(stderr, "torchprobe: process %u: op returns through `ret` probes (about 10x the cost): %s\n",
                 t.pid, why.c_str());
  return false;
}

Status RecordSession::AttachTarget(Target& t) {
  StatusOr<MappedImage> image = FindMappedImage(t.pid, kTorchLibrary);
  if (!image.ok()) {
    if (!IsProcessAlive(t.pid)) return Status::Ok();  // gone meanwhile: nothing to trace
    if (!launch_) WatchLoads(t);  // launch mode watches every loader of the command
    return Status::Ok();
  }
  std::string identity = ImageIdentity(image->host_path);
  if (identity.empty()) return Status::Ok();  // gone meanwhile
  StatusOr<const ImagePlan*> plan = PlanImage(*image, identity);
  if (!plan.ok()) return plan.status();
  if (identity != t.image) {
    Status status = AttachOpsOf(t, *image, identity, **plan);
    if (!status.ok() || t.image.empty()) return status;
  }
  Status extra = AttachExtraImages(t);
  if (!extra.ok()) return extra;
  return AttachProbeSets(t);
}

Status RecordSession::AttachOpsOf(Target& t, const MappedImage& image, const std::string& identity,
                                  const ImagePlan& plan) {
  int pid = static_cast<int>(t.pid);
  // The catch probe first: an op error caught right after attaching must
  // already close the ops it unwound.
  t.catcher = AttachCatch(t.pid, pid);
  StatusOr<bool> uretprobes = GuardReturns(t);
  if (!uretprobes.ok()) return uretprobes.status();
  StatusOr<ProbeLinks> links = AttachOps(plan, image.host_path, pid, *uretprobes);
  if (!links.ok()) {
    // A short-lived child (a worker that ran a moment) is not an error.
    if (!IsProcessAlive(t.pid) && !t.role.empty()) return Status::Ok();
    if (!IsProcessAlive(t.pid))
      return Status::Error("process " + std::to_string(t.pid) + " exited while it was being attached");
    return links.status();
  }
  t.ops = std::move(*links);
  t.image = identity;
  t.image_path = image.host_path;
  bpf_->MarkAttached(t.pid);
  if (t.forked_ns) {
    // Not held at its fork (a kernel before 6.13): what it ran until now
    // was not traced. Said in its name and counted.
    uint64_t untraced = NowNs() - t.forked_ns;
    t.forked_ns = 0;
    ++model_->stats().children_untraced;
    model_->stats().children_untraced_ns += untraced;
    names_.SetRole(t.pid, t.role + ", traced from " + FormatDuration(untraced) + " after its fork");
  }
  return Status::Ok();
}

Status RecordSession::AttachExtraImages(Target& t) {
  int pid = static_cast<int>(t.pid);
  vtable_symbols_.Remember(t.pid);  // autograd nodes are named after it may be gone
  for (const ProbeImage& kind : kProbeImages) {
    if (&kind == &kProbeImages[0]) continue;
    StatusOr<MappedImage> other = FindMappedImage(t.pid, kind.library);
    if (!other.ok()) continue;  // not used by this process (yet: seen at its next load)
    std::string other_identity = ImageIdentity(other->host_path);
    if (other_identity.empty() || !t.extra_images.insert(other_identity).second) continue;
    StatusOr<const ImagePlan*> other_plan = PlanImage(*other, other_identity, kind);
    if (!other_plan.ok()) return other_plan.status();
    StatusOr<ProbeLinks> other_links = AttachOps(**other_plan, other->host_path, pid, t.guarded);
    if (!other_links.ok()) return other_links.status();
    t.extra.push_back(std::move(*other_links));
  }
  return Status::Ok();
}

Status RecordSession::AttachProbeSets(Target& t) {
  TracedProcess process{t.pid, t.image_path, t.image};
  for (auto& set : sets_) {
    Status status = set->Attach(process);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

void RecordSession::ReleaseImages(Target& t) {
  if (t.guarded) keeper_->ReleaseReturns(static_cast<pid_t>(t.pid));  // after its return probes
  t.guard.Detach();
  t.guarded = false;
  t.ops.Detach();
  t.catcher.Detach();
  t.extra.clear();
  t.extra_images.clear();
  for (auto& set : sets_) set->Release(t.pid);
  t.image.clear();
  t.image_path.clear();
}

void RecordSession::ReleaseTarget(Target& t) {
  ReleaseImages(t);
  t.loads.Detach();
  t.loader.clear();
  for (auto& set : sets_) set->Exited(t.pid);
}

Status RecordSession::StartLaunch() {
  // Stop the command at each library load until libtorch is attached, so
  // its first op is seen (the probe is on the dynamic loader's hook).
  std::optional<Loader> loader = FindLoader(getpid());
  if (!loader) return Status::Error("cannot find torchprobe's own dynamic loader (" + std::string(kLoader) + ")");
  Status status = launcher_.Fork(options_.command);
  if (!status.ok()) return status;
  uint32_t child = static_cast<uint32_t>(launcher_.pid());
  AddTarget(child, "");
  bpf_->SetLoads(LOADS_HOLD);
  StatusOr<ProbeLinks> links = AttachLoader(*loader, -1);
  if (!links.ok()) return links.status();
  launch_links_.push_back(std::move(*links));
  launch_loaders_.insert(loader->identity);
  return launcher_.Release();
}

Status RecordSession::OnLaunchLoad(uint32_t pid) {
  auto it = targets_.find(pid);
  if (it == targets_.end()) return Status::Ok();
  // libtorch once, then the other probe images; its loads stop holding it
  // once its libtorch is attached (each process of the tree on its own).
  return AttachTarget(it->second);
}

void RecordSession::OnLaunchExec(uint32_t pid) {
  // A program run through another dynamic loader (a chroot's, a container's)
  // loads libtorch through that one: watch it too.
  std::optional<Loader> loader = FindLoader(pid);
  if (!loader || !launch_loaders_.insert(loader->identity).second) return;
  StatusOr<ProbeLinks> links = AttachLoader(*loader, -1);
  if (links.ok()) launch_links_.push_back(std::move(*links));
}

void RecordSession::ResumeHeld() {
  for (uint32_t pid : pending_loads_) {
    kill(static_cast<pid_t>(pid), SIGCONT);  // always: never leave a target stopped
    bpf_->Unhold(pid);
  }
  pending_loads_.clear();
}

Status RecordSession::HandleProcessEvents() {
  Status result = Status::Ok();
  auto keep_first_error = [&result](const Status& status) {
    if (result.ok() && !status.ok()) result = status;
  };
  std::vector<ForkEvent> forks;
  forks.swap(pending_forks_);
  for (const ForkEvent& fork : forks) {
    Target& t = AddTarget(fork.child, "child of " + std::to_string(fork.parent));
    if (!fork.held) {
      t.forked_ns = fork.ts_ns;  // running untraced until attached: measured then
      t.attach_pending = true;   // next turn: most fork+exec children have exec'd by then
      continue;
    }
    // Held stopped at its fork: attached now, then let go, so its first op
    // is traced (and not attached twice: it cannot have exec'd).
    if (result.ok()) keep_first_error(AttachTarget(t));
    kill(static_cast<pid_t>(fork.child), SIGCONT);  // always: never leave a process stopped
    bpf_->Unhold(fork.child);
    ++model_->stats().children_held;
    model_->stats().children_held_ns += NowNs() - fork.ts_ns;
  }
  std::vector<uint32_t> execs;
  execs.swap(pending_execs_);
  for (uint32_t pid : execs) {
    if (launch_) OnLaunchExec(pid);
    auto it = targets_.find(pid);
    if (it == targets_.end()) continue;
    // The old program's images are gone with it; its loader watch (a link
    // on the process) goes on.
    ReleaseImages(it->second);
    it->second.attach_pending = true;
    // Launched, it is held at its exec until attached: the new program has
    // missed nothing (a vfork'd child, not held at its fork, ran nothing).
    if (launch_) it->second.forked_ns = 0;
  }
  for (uint32_t pid : pending_loads_) {
    if (launch_) {
      if (result.ok()) keep_first_error(OnLaunchLoad(pid));
    } else if (auto it = targets_.find(pid); it != targets_.end()) {
      it->second.attach_pending = true;
    }
  }
  if (launch_) ResumeHeld();
  pending_loads_.clear();
  for (auto& [pid, t] : targets_) {
    if (!t.attach_pending || t.exited || !result.ok()) continue;
    t.attach_pending = false;
    keep_first_error(AttachTarget(t));
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
      pending_forks_.push_back({event.hdr.pid, event.child_pid, event.child_held != 0, event.hdr.ts_ns});
      // One of the run's from its fork on, said now: its first GPU records
      // may be on their way before the next turn makes it a target.
      for (auto& set : sets_) set->Follow(event.child_pid, event.hdr.ts_ns);
      break;
    case EV_PROC_EXEC:
      pending_execs_.push_back(event.hdr.pid);
      // Launched, it may be held at its exec (on_exec): resumed with the
      // loads, once its loader is watched.
      if (launch_) pending_loads_.push_back(event.hdr.pid);
      break;
    case EV_LIB_LOAD:
      pending_loads_.push_back(event.hdr.pid);
      break;
  }
}

void RecordSession::ApplyExits() {
  for (const tp_proc_event& exit : pending_exits_) {
    model_->OnThreadExit(exit.hdr.pid, exit.hdr.tid, exit.hdr.ts_ns, exit.comm);
    boxed_->ForgetThread(exit.hdr.pid, exit.hdr.tid);
    autograd_->ForgetThread(exit.hdr.pid, exit.hdr.tid);
    if (!exit.is_leader) continue;
    auto it = targets_.find(exit.hdr.pid);
    if (it == targets_.end()) continue;
    it->second.exited = true;
    ReleaseTarget(it->second);  // nothing left to unpatch: fast
  }
  pending_exits_.clear();
}

bool RecordSession::TargetsAlive() {
  if (launch_ && command_status_ < 0 && !launcher_.Exited(&command_status_)) return true;
  bool alive = false;
  for (auto& [pid, t] : targets_) {
    if (t.exited) continue;
    if (IsProcessAlive(pid)) {
      alive = true;
      continue;
    }
    t.exited = true;
    bpf_->RemovePid(pid);
    ReleaseTarget(t);
  }
  return alive;
}

void RecordSession::CloseGate() {
  // No new op from here on; the ops still open may still return while the
  // ring drains once, then nothing is recorded at all.
  model_->SetStop(NowNs());
  bpf_->SetGate(GATE_RETURNS_ONLY);
  bool more = false;
  reader_.Poll(options_.drain_ms, &more);
  bpf_->SetGate(GATE_CLOSED);
  reader_.DrainAll();
  ApplyExits();
}

void RecordSession::StopRecording() {
  bpf_->SetLoads(LOADS_IGNORE);
  CloseGate();
  // A launched command stopped at a library load must go on, as must a
  // child held at a fork whose event was not handled.
  ResumeHeld();
  for (uint32_t pid : bpf_->Held()) {
    kill(static_cast<pid_t>(pid), SIGCONT);
    bpf_->Unhold(pid);
  }
}

void RecordSession::RemoveProbes() {
  // Hottest first: the keeper knows the calls of every op.
  const std::vector<uint64_t>& calls = model_->op_calls();
  for (uint32_t op = 0; op < calls.size(); ++op)
    if (calls[op]) keeper_->SetCalls(op, calls[op]);
  uint64_t start = NowNs();
  keeper_->ReleaseAll();
  for (const auto& [pid, t] : targets_)
    if (t.guarded) keeper_->ReleaseReturns(static_cast<pid_t>(pid));
  TestPause("removing", options_.quiet);
  targets_.clear();
  launch_links_.clear();
  // Wait for the probes the target hits; leave unused ones to the keeper
  // (per-symbol probes come off at ~20 a second). A stop signal ends the
  // wait: the keeper goes on alone.
  int stops = StopSignals();
  for (;;) {
    ProbeKeeper::Progress p = keeper_->progress();
    // Guarded processes are let go within milliseconds, unless a thread is
    // in uninterruptible sleep: then the keeper goes on alone.
    bool guards_done = p.guarded == 0 || NowNs() - start > 2 * kSecond;
    if ((p.pending_hot == 0 && guards_done) || StopSignals() != stops) break;
    status_line_.Show(NowNs(), "removing probes: " + std::to_string(p.pending_hot) +
                                   " the target hits, " + std::to_string(p.pending - p.pending_hot) +
                                   " unused (Ctrl-C leaves them to pid " +
                                   std::to_string(keeper_->pid()) + ")");
    usleep(10'000);
  }
  status_line_.Clear();
  model_->stats().detach_ns = NowNs() - start;
}

int RecordSession::WaitForCommand() {
  if (command_status_ < 0) {
    int stops = StopSignals();
    std::string text = "tracing stopped; waiting for the command (pid " +
                       std::to_string(launcher_.pid()) + ") to exit";
    while (!launcher_.Exited(&command_status_)) {
      if (StopSignals() != stops) {
        status_line_.Clear();
        std::fprintf(stderr, "torchprobe: not waiting for the command any longer: it goes on as pid %d\n",
                     launcher_.pid());
        return 128 + SIGINT;
      }
      status_line_.Show(NowNs(), text);
      usleep(20'000);
    }
    status_line_.Clear();
  }
  if (WIFEXITED(command_status_)) return WEXITSTATUS(command_status_);
  if (WIFSIGNALED(command_status_)) return 128 + WTERMSIG(command_status_);
  return 1;
}

void RecordSession::StartCalibration() {
  if (options_.empty_probes) return;  // the bench's floor: no cost to estimate
  ProbeCostRoutes routes;
  // op_uret loads in `ret` mode too (the guard's programs come with it).
  routes.uretprobe = bpf_->Program("op_uret") != nullptr && options_.returns != "ret";
  routes.ret = true;  // the route of a process whose returns fall back to `ret` probes
  routes.use_uprobe_multi = use_multi_;
  calibration_.Start(std::move(routes));
}


void RecordSession::PrintSummary(const TraceStats& stats) {
  if (options_.quiet) return;
  RunSummary run;
  // --every-steps: one set of files per steps window, numbered.
  run.outputs = DescribeTraceOutputs(options_, options_.windows.every_steps > 0);
  if (windows_ > 0 || !window_open_)  // the numbers: all windows together
    run.outputs = Counted(windows_ + window_open_, "window", "windows") + " of " + run.outputs;
  run.events = stats.events + events_before_;
  for (const ProcessInfo& process : model_->processes())
    run.traced.push_back(std::to_string(process.pid) + " " + process.name);
  for (const auto& set : sets_)
    if (std::string line = set->Summary(stats); !line.empty()) run.set_lines.push_back(line);
  if (stats.autograd_nodes_unnamed)
    run.set_lines.push_back(
        Counted(stats.autograd_nodes_unnamed, "autograd engine call", "autograd engine calls") + " shown as \"" +
        std::string(kUnnamedNode) + "\": the node could not be named (first: " +
        (vtable_symbols_.first_failure().empty() ? "no node read" : vtable_symbols_.first_failure()) + ")");
  run.children_unfollowed = !options_.follow_children && !launch_;
  run.why_untraced_children = !options_.hold_children ? "--no-hold-children"
                              : bpf_->holds_forks()   ? "attached by pid, a vfork'd child is not held until it has exec'd"
                                                      : "holding a child at its fork needs Linux 6.13+";
  run.probes_left = keeper_->progress().pending;
  run.keeper_pid = keeper_->pid();
  std::fputs(FormatRunSummary(run, stats).c_str(), stderr);
}

void RecordSession::FillStats(TraceStats& stats) {
  stats.dropped_events = bpf_->Drops(DROP_RINGBUF_FULL) + bpf_->Drops(DROP_CTL_FULL);
  stats.unknown_events = reader_.stats().unknown + reader_.stats().malformed;
  stats.attach_mode = use_multi_ ? "uprobe_multi" : "uprobe";
  stats.throws_fixed = keeper_->progress().throws_fixed;
  stats.attach_ns = attach_ns_;
  calibration_.Fill(stats, options_.quiet);
  for (auto& set : sets_) set->FillStats(stats);
}

void RecordSession::WireModels(std::unique_ptr<TraceFanout> outputs) {
  // What planning and attaching counted, and which processes return through
  // `ret`, carry over to a capture window's fresh model.
  std::unique_ptr<OpStackModel> previous = std::move(model_);
  writer_ = std::move(outputs);
  TraceFanout* files = writer_.get();
  TraceSink* outputs_sink = writer_.get();
  if (options_.windows.steps > 0) {  // --steps: the outputs change hands at step boundaries
    files = nullptr;
    step_windows_ = MakeStepWindows(options_, std::move(writer_), [this] {
      TraceStats stats = model_->stats();
      FillStats(stats);
      return stats;
    });
    outputs_sink = step_windows_.get();
  }
  steps_ = std::make_unique<StepSlicer>(
      outputs_sink, &ops_, options_.step_marker.empty() ? kDefaultStepMarker : options_.step_marker);
  sink_ = steps_.get();
  model_ = std::make_unique<OpStackModel>(sink_, &names_);
  auto ops_grew = [this] {
    if (begun_) sink_->AddOps(ops_);
  };
  if (previous) {
    model_->InheritReturnRoutes(*previous);
    boxed_->SetModel(model_.get());
  } else {
    boxed_ = std::make_unique<BoxedModel>(&ops_, model_.get(), ops_grew);
    autograd_ = std::make_unique<AutogradModel>(
        &ops_, [this](uint32_t pid, uint64_t address) { return vtable_symbols_.Name(pid, address); },
        [](uint32_t pid, uint64_t type) { return ReadPythonTypeName(static_cast<pid_t>(pid), type); }, ops_grew);
  }
  autograd_->SetOutput([this](const tp_op_event& event) { boxed_->OnOpEvent(event); }, &model_->stats());
  ModelWiring wiring{model_.get(), outputs_sink, files, &ops_, &names_, ops_grew};
  for (auto& set : sets_) set->Wire(wiring);
}

Status RecordSession::FollowSchedule(WindowSchedule& schedule, int* toggles_seen) {
  uint64_t now = NowNs();
  // One SIGUSR1 per turn: an on and an off that arrive together still make
  // a (short) window.
  if (*toggles_seen != ToggleSignals()) {
    ++*toggles_seen;
    schedule.Toggle(now);
  }
  int64_t slot = schedule.Slot(now);
  if (!begun_ || (window_open_ && slot == window_slot_)) return Status::Ok();
  if (window_open_) {
    Status status = CloseWindow();
    if (!status.ok()) return status;
  }
  if (slot != WindowSchedule::kClosed) {
    window_slot_ = slot;
    OpenWindow(NowNs());
  }
  return Status::Ok();
}

Status RecordSession::CloseWindow() {
  CloseGate();  // as at the stop
  window_open_ = false;
  TraceStats& stats = model_->stats();
  model_->FinishThreads(NowNs());
  FillStats(stats);
  std::string error;
  if (!sink_->Finish(stats, &error)) return Status::Error(error);
  status_line_.Clear();
  if (!options_.quiet) std::fprintf(stderr, "torchprobe: capture off: window %" PRId64 " written\n", windows_);
  // The next window's files are opened now, so a path that stopped working
  // is one line here rather than lost events later.
  StatusOr<std::unique_ptr<TraceFanout>> outputs = OpenTraceOutputs(options_, ++windows_);
  if (!outputs.ok()) return outputs.status();
  events_before_ += stats.events;
  TraceStats planned = NextWindowStats(stats);  // what planning and attaching counted carries over
  WireModels(std::move(*outputs));
  model_->stats() = planned;
  return Status::Ok();
}

void RecordSession::OpenWindow(uint64_t now) {
  ClockSnapshot clock;
  clock.boottime_ns = NowNs(CLOCK_BOOTTIME);
  clock.monotonic_ns = NowNs(CLOCK_MONOTONIC);
  if (windows_ > 0) sink_->Begin(ops_, clock);  // the first was begun at the first attach
  model_->SetStart(now);
  window_open_ = true;
  bpf_->SetGate(GATE_OPEN);
  status_line_.Clear();
  if (!options_.quiet) std::fprintf(stderr, "torchprobe: capture on: window %" PRId64 "\n", windows_);
}

int RecordSession::Run() {
  InstallRecordSignals();
  // The keeper first, while torchprobe has one thread and no link.
  StatusOr<std::unique_ptr<ProbeKeeper>> keeper = ProbeKeeper::Start();
  if (!keeper.ok()) return Fail(keeper.status());
  keeper_ = std::move(*keeper);
  status_line_ = StatusLine(options_.quiet);
  Status status = Prepare();
  if (!status.ok()) return Fail(status);
  StartCalibration();
  TestPause("planned", options_.quiet);
  if (launch_) {
    status = StartLaunch();
    if (!status.ok()) {
      StopRecording();
      RemoveProbes();
      return Fail(status);
    }
  } else {
    // The window opens once every named process is attached: --duration
    // counts from there, and no op is half-seen while links go live.
    bpf_->SetGate(GATE_CLOSED);
    for (uint32_t pid : options_.pids) {
      Target& t = AddTarget(pid, "");
      if (!options_.wait && !IsProcessAlive(pid))
        return Fail(Status::Error("process " + std::to_string(pid) + " exited before it could be attached"));
      status = AttachTarget(t);
      if (status.ok() && !options_.wait && t.image.empty())
        status = Status::Error("process " + std::to_string(pid) + " exited before it could be attached");
      if (!status.ok()) {
        RemoveProbes();
        return Fail(status);
      }
    }
    bpf_->SetGate(window_open_ ? GATE_OPEN : GATE_CLOSED);
    if (begun_) model_->SetStart(NowNs());
    TestPause("recording", options_.quiet);  // every named process is traced from here on
    if (options_.follow_children) {
      for (uint32_t pid : options_.pids)
        for (uint32_t child : ListDescendants(pid))
          if (!targets_.count(child)) AddTarget(child, "child of " + std::to_string(ReadParentPid(child))).attach_pending = true;
    }
  }
  uint64_t start = NowNs();
  uint64_t deadline = options_.duration_s > 0 ? start + static_cast<uint64_t>(options_.duration_s * 1e9) : 0;
  WindowSchedule schedule(options_.windows, start);
  int toggles_seen = 0;  // the handler is in place from the start of Run
  Status error = Status::Ok();
  uint64_t targets_known_ns = 0;  // every fork made before it has been read
  while (StopSignals() == 0) {
    bool more = false;
    uint64_t turn = NowNs();
    error = reader_.Poll(options_.drain_ms, &more);
    if (!more) targets_known_ns = turn;
    for (auto& set : sets_) set->Poll(targets_known_ns);
    if (!more) ApplyExits();
    if (error.ok()) error = HandleProcessEvents();
    if (error.ok()) error = FollowSchedule(schedule, &toggles_seen);
    if (!error.ok()) break;
    uint64_t now = NowNs();
    if (deadline && now >= deadline) break;
    if (step_windows_ && step_windows_->done()) break;  // --steps: the last window is written
    if (!TargetsAlive()) break;
    if (!begun_ && options_.wait) {
      status_line_.Show(now, "waiting for pid " + std::to_string(options_.pids.front()) + " to load " +
                                 kTorchLibrary + " (Ctrl-C to stop)");
    } else {
      status_line_.Update(now, model_->stats().events,
                          bpf_->Drops(DROP_RINGBUF_FULL) + bpf_->Drops(DROP_CTL_FULL) +
                              bpf_->Drops(DROP_MEM_FULL),
                          deadline);
    }
  }
  status_line_.Clear();
  StopRecording();
  TraceStats& stats = model_->stats();
  model_->FinishThreads(NowNs());
  FillStats(stats);
  // The trace is complete now: write it before the (maybe slow) removal.
  // Stopped between windows, the next window's files never appear.
  std::string write_error;
  TestPause("writing", options_.quiet);  // tests: a stop signal while the outputs are half written
  bool written = error.ok() && begun_ && (!window_open_ || sink_->Finish(stats, &write_error));
  for (auto& set : sets_)
    if (written) written = set->FinishRun(&write_error);
  RemoveProbes();
  int exit_code = 0;
  if (!error.ok()) {
    exit_code = Fail(error);
  } else if (!begun_ && launch_) {
    // Not an error of torchprobe's: the command ran as asked, and its own
    // status is the answer (as `time` gives it); what was not traced is said.
    std::fprintf(stderr, "torchprobe: warning: the command never loaded %s: not a PyTorch program, nothing traced, "
                 "no file written\n", kTorchLibrary);
  } else if (!begun_) {
    exit_code = Fail(Status::Error("no process loaded " + std::string(kTorchLibrary) +
                                   " before tracing stopped: nothing traced"));
  } else if (!written) {
    exit_code = Fail(Status::Error(write_error));
  } else {
    PrintSummary(stats);
  }
  keeper_->Finish(keeper_->progress().pending == 0);
  if (launch_) {
    int command = WaitForCommand();
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
