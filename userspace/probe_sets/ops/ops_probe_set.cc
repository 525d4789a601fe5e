#include "userspace/probe_sets/ops/ops_probe_set.h"

#include "userspace/base/clock.h"
#include "userspace/base/counted.h"
#include "userspace/base/proc_maps.h"
#include "userspace/discover/autograd_probes.h"
#include "userspace/discover/elf_symbols.h"

namespace torchprobe {

OpsProbeSet::OpsProbeSet(OpsOptions options, OpTable* ops)
    : options_(std::move(options)), ops_(ops), guard_(options_.returns, options_.quiet) {}

Status OpsProbeSet::Plan(const MappedImage& libtorch) {
  std::string identity = ImageIdentity(libtorch.host_path);
  if (identity.empty()) return Status::Error("process of " + libtorch.path + " exited while it was being planned");
  return PlanImage(libtorch, identity, kTorchImage).status();
}

StatusOr<const OpsProbeSet::ImagePlan*> OpsProbeSet::PlanImage(const MappedImage& image, const std::string& identity,
                                                               const ProbeImage& kind) {
  auto it = images_.find(identity);
  if (it != images_.end()) return &it->second;
  StatusOr<OpProbeSet> probes = kind.find(image.host_path);
  if (!probes.ok()) return probes.status();
  if (probes->probes.empty() && &kind == &kTorchImage)
    return Status::Error(image.path + " has no at::_ops::*::call functions: not a libtorch build we know");
  ImagePlan plan;
  plan.first_op_id = static_cast<uint32_t>(ops_->size());
  plan.kind = &kind;
  for (const OpProbe& probe : probes->probes) {
    if (probe.boxed) boxed_->AddCopy(static_cast<uint32_t>(ops_->size()));
    ops_->push_back(probe.op);
  }
  plan.probes = std::move(*probes);
  model_->stats().unresolved_symbols += plan.probes.unresolved;
  model_->stats().without_returns += plan.probes.without_returns;
  ops_grew_();
  return &images_.emplace(identity, std::move(plan)).first->second;
}

StatusOr<std::unique_ptr<BpfPrograms>> OpsProbeSet::Load(BpfConfig config) {
  // The guard's programs load in `ret` mode too (return_guard.h).
  config.uretprobe_returns = config.use_uprobe_multi && !config.empty_programs;
  if (options_.returns == "uretprobe" && !config.use_uprobe_multi)
    return Status::Error("--returns uretprobe: needs uprobe_multi links (kernel 6.6+, not --attach uprobe)");
  if (!config.use_uprobe_multi) guard_.SetUnavailable("per-symbol uprobes (no uprobe_multi)");
  StatusOr<std::unique_ptr<BpfPrograms>> bpf = BpfPrograms::Load(config);
  if (!bpf.ok() && config.uretprobe_returns && options_.returns != "uretprobe") {
    // A kernel whose uretprobe bookkeeping we cannot read: `ret` probes.
    guard_.SetUnavailable("its BPF programs do not load here (" + bpf.status().message() + ")");
    config.uretprobe_returns = false;
    bpf = BpfPrograms::Load(config);
  }
  return bpf;
}

void OpsProbeSet::SetContext(const ProbeSetContext& context) {
  ProbeSet::SetContext(context);
  guard_.SetContext(context);
  if (options_.empty_probes) return;  // the bench's floor: no cost to estimate
  // The probes' own cost, measured on a child of torchprobe beside the
  // attach (attach/probe_cost.h), put in the stats of every output.
  ProbeCostRoutes routes;
  // op_uret loads in `ret` mode too (the guard's programs come with it).
  routes.uretprobe = context.bpf->Program("op_uret") != nullptr && options_.returns != "ret";
  routes.ret = true;  // the route of a process whose returns fall back to `ret` probes
  routes.use_uprobe_multi = context.use_uprobe_multi;
  calibration_.Start(std::move(routes));
}

void OpsProbeSet::Route(EventRouter& router) {
  router.On<tp_op_event>({EV_OP_ENTER, EV_OP_EXIT, EV_OP_UNWIND, EV_OP_RESTORED},
                         [this](const tp_op_event& event) { autograd_->OnOpEvent(event); });
  router.On<tp_boxed_event>({EV_BOXED_ENTER}, [this](const tp_boxed_event& event) { boxed_->OnBoxedEvent(event); });
  // The autograd engine's calls, named by their node: an op's entry.
  router.On<tp_autograd_node_event>({EV_AUTOGRAD_NODE},
                                    [this](const tp_autograd_node_event& event) { autograd_->OnNodeEntry(event); });
  // An entry that carries the op's arguments opens its slice before the
  // sets fill it (shapes).
  router.On<tp_op_shapes_event>({EV_OP_SHAPES}, [this](const tp_op_shapes_event& event) { Enter(event.op); });
}

void OpsProbeSet::RouteLate(EventRouter& router) {
  // ... or after the sets took the call's arguments (CUDA calls,
  // collectives: the innermost op is then the caller).
  router.On<tp_cuda_call_event>({EV_CUDA_CALL}, [this](const tp_cuda_call_event& event) { Enter(event.op); });
  router.On<tp_collective_event>({EV_COLLECTIVE}, [this](const tp_collective_event& event) { Enter(event.op); });
}

StatusOr<ProbeLinks> OpsProbeSet::AttachOps(const ImagePlan& plan, const std::string& path, int pid, bool uretprobes) {
  BpfPrograms& bpf = *context_.bpf;
  ProbeTarget entries, returns, boxed, collectives, nodes;
  for (ProbeTarget* t : {&entries, &returns, &boxed, &collectives, &nodes}) {
    t->path = path;
    t->pid = pid;
  }
  // A set that reads every libtorch op's arguments enters its ops instead.
  const ProbeSet* reader = nullptr;
  bpf_program* reader_entry = nullptr;
  for (const ProbeSet* set : readers_) {
    if (plan.kind != &kTorchImage || !set->OpEntryProgram()) continue;
    reader_entry = bpf.Program(set->OpEntryProgram());
    if (reader_entry) reader = set;
  }
  size_t probed = 0;
  for (size_t i = 0; i < plan.probes.probes.size(); ++i) {
    const OpProbe& probe = plan.probes.probes[i];
    uint64_t op_id = plan.first_op_id + i;
    if (options_.probe_only && !options_.probe_only(probe)) continue;
    ++probed;
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
    } else if (reader) {
      reader->LayOutOp(probe, layout);
    }
    if (target != &entries || reader) {
      Status status = bpf.SetOpLayout(static_cast<uint32_t>(op_id), layout);
      if (!status.ok()) return status;
    }
    target->offsets.push_back(probe.file_offset);
    target->cookies.push_back(op_id);
    for (uint64_t offset : probe.return_offsets) {
      returns.offsets.push_back(offset);
      returns.cookies.push_back(probe.tail_returns ? op_id | TP_COOKIE_SHARED_RET : op_id);
    }
  }
  bpf_program* on_return = bpf.Program("op_return");
  if (uretprobes || options_.empty_uretprobes) {  // on the entries (bench: the uretprobe floor)
    returns.offsets = entries.offsets;
    returns.cookies = entries.cookies;
    for (const ProbeTarget* more : {&boxed, &collectives, &nodes}) {
      returns.offsets.insert(returns.offsets.end(), more->offsets.begin(), more->offsets.end());
      returns.cookies.insert(returns.cookies.end(), more->cookies.begin(), more->cookies.end());
    }
    returns.retprobe = true;
    if (uretprobes) on_return = bpf.Program("op_uret");
  }
  // The links' witness addresses (probe_keeper.h) come from the process'
  // maps, read once for all the groups below: read before the clock
  // starts, with none of these probes live yet, so attach_ns is what the
  // target pays.
  if (context_.keeper && pid > 0) MappedCodeAddresses(static_cast<uint32_t>(pid), path, {});
  uint64_t start = NowNs();
  bpf_program* on_entry = reader_entry ? reader_entry : bpf.Program(plan.kind->entry);
  bool multi = context_.use_uprobe_multi;
  StatusOr<ProbeLinks> links = ProbeLinks::Attach(on_entry, entries, on_return, &returns, multi, context_.keeper);
  if (!links.ok()) return links.status();
  for (auto [program, target] : {std::pair{"boxed_enter", &boxed}, std::pair{"collective_enter", &collectives},
                                 std::pair{"autograd_enter", &nodes}}) {
    Status status = links->AddEntries(bpf.Program(program), *target, multi);
    if (!status.ok()) return status;
  }
  uint64_t live = NowNs();
  attach_ns_ += live - start;
  if (model_->start_ns() == 0) model_->SetStart(live);
  model_->stats().probed_symbols += probed;
  return links;
}

ProbeLinks OpsProbeSet::AttachCatch(uint32_t pid) {
  bpf_program* on_catch = context_.bpf->Program("on_catch");
  if (!on_catch) return ProbeLinks();
  StatusOr<MappedImage> runtime = FindMappedImage(pid, "libstdc++.so");
  if (!runtime.ok()) return ProbeLinks();
  StatusOr<uint64_t> offset = FindFunctionOffset(runtime->host_path, "__cxa_begin_catch");
  if (!offset.ok()) return ProbeLinks();
  StatusOr<ProbeLinks> links = AttachFunction(
      {runtime->host_path, static_cast<int>(pid), context_.use_uprobe_multi, context_.keeper}, on_catch, *offset);
  if (!links.ok()) return ProbeLinks();  // unwound ops are then closed by the next op
  ++model_->stats().catch_probes;
  return std::move(*links);
}

StatusOr<bool> OpsProbeSet::AttachTorch(const TracedProcess& process) {
  MappedImage libtorch;  // planned when named (Plan) or as the tracker found it
  libtorch.path = kTorchLibrary;
  libtorch.host_path = process.torch_path;
  StatusOr<const ImagePlan*> plan = PlanImage(libtorch, process.torch_identity, kTorchImage);
  if (!plan.ok()) return plan.status();
  Process& p = processes_[process.pid];
  if (p.torch == process.torch_identity) return true;
  // The catch probe first: an op error caught right after attaching must
  // already close the ops it unwound.
  p.catcher = AttachCatch(process.pid);
  StatusOr<bool> uretprobes = guard_.Guard(process.pid, *model_);
  if (!uretprobes.ok()) return uretprobes.status();
  StatusOr<ProbeLinks> links = AttachOps(**plan, process.torch_path, static_cast<int>(process.pid), *uretprobes);
  if (!links.ok()) {
    if (!IsProcessAlive(process.pid)) return false;  // it went away meanwhile
    return links.status();
  }
  p.ops = std::move(*links);
  p.torch = process.torch_identity;
  return true;
}

Status OpsProbeSet::Attach(const TracedProcess& process) {
  int pid = static_cast<int>(process.pid);
  vtable_symbols_.Remember(process.pid);  // autograd nodes are named after it may be gone
  Process& p = processes_[process.pid];
  for (const ProbeImage& kind : kProbeImages) {
    if (&kind == &kTorchImage) continue;
    StatusOr<MappedImage> image = FindMappedImage(process.pid, kind.library);
    if (!image.ok()) continue;  // not used by this process (yet: seen at its next load)
    std::string identity = ImageIdentity(image->host_path);
    if (identity.empty() || !p.beside.insert(identity).second) continue;
    StatusOr<const ImagePlan*> plan = PlanImage(*image, identity, kind);
    if (!plan.ok()) return plan.status();
    StatusOr<ProbeLinks> links = AttachOps(**plan, image->host_path, pid, guard_.guarded(process.pid));
    if (!links.ok()) return links.status();
    p.extra.push_back(std::move(*links));
  }
  return Status::Ok();
}

void OpsProbeSet::Release(uint32_t pid) {
  guard_.Release(pid);  // before its return probes go
  processes_.erase(pid);
}

void OpsProbeSet::ThreadExited(uint32_t pid, uint32_t tid) {
  boxed_->ForgetThread(pid, tid);
  autograd_->ForgetThread(pid, tid);
}

void OpsProbeSet::Wire(const ModelWiring& wiring) {
  OpStackModel* previous = model_;
  model_ = wiring.model;
  if (previous) {
    // Which processes return through `ret` carries over to a window's model.
    model_->InheritReturnRoutes(*previous);
    boxed_->SetModel(model_);
  } else {
    ops_grew_ = wiring.ops_grew;
    boxed_ = std::make_unique<BoxedModel>(ops_, model_, ops_grew_);
    autograd_ = std::make_unique<AutogradModel>(
        ops_, [this](uint32_t pid, uint64_t address) { return vtable_symbols_.Name(pid, address); },
        [](uint32_t pid, uint64_t type) { return ReadPythonTypeName(static_cast<pid_t>(pid), type); }, ops_grew_);
  }
  autograd_->SetOutput([this](const tp_op_event& event) { boxed_->OnOpEvent(event); }, &model_->stats());
}

void OpsProbeSet::FillStats(TraceStats& stats) {
  stats.throws_fixed = context_.keeper->progress().throws_fixed;
  stats.attach_ns = attach_ns_;
  calibration_.Fill(stats, options_.quiet);
}

std::string OpsProbeSet::Summary(const TraceStats& stats) const {
  if (!stats.autograd_nodes_unnamed) return "";
  return Counted(stats.autograd_nodes_unnamed, "autograd engine call", "autograd engine calls") + " shown as \"" +
         std::string(kUnnamedNode) + "\": the node could not be named (first: " +
         (vtable_symbols_.first_failure().empty() ? "no node read" : vtable_symbols_.first_failure()) + ")";
}

void OpsProbeSet::BeforeRemoval() {
  // Hottest first: the keeper knows the calls of every op.
  const std::vector<uint64_t>& calls = model_->op_calls();
  for (uint32_t op = 0; op < calls.size(); ++op)
    if (calls[op]) context_.keeper->SetCalls(op, calls[op]);
}

}  // namespace torchprobe
