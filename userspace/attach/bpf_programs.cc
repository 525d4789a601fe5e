// Skeleton lifecycle; see the header.
#include "userspace/attach/bpf_programs.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "torchprobe.skel.h"
#include "userspace/attach/uprobe_multi.h"

namespace torchprobe {
namespace {

std::string Errno(int err) { return std::strerror(err < 0 ? -err : err); }

// libbpf prints to stderr by default; keep its warnings for -v only.
int QuietLibbpf(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_WARN && std::getenv("TORCHPROBE_DEBUG"))
    return vfprintf(stderr, format, args);
  return 0;
}

// A kernel function BPF may call (a kfunc), by name in the kernel's BTF.
bool KernelHas(const char* kfunc) {
  btf* kernel = btf__load_vmlinux_btf();
  if (!kernel) return false;
  bool found = btf__find_by_name_kind(kernel, kfunc, BTF_KIND_FUNC) > 0;
  btf__free(kernel);
  return found;
}

}  // namespace

StatusOr<std::unique_ptr<BpfPrograms>> BpfPrograms::Load(const BpfConfig& config) {
  libbpf_set_print(QuietLibbpf);
  std::unique_ptr<BpfPrograms> programs(new BpfPrograms(config));
  torchprobe_bpf* skel = torchprobe_bpf__open();
  if (!skel) return Status::Error("cannot open the BPF object: " + Errno(errno));
  programs->skel_ = skel;

  skel->rodata->cfg.filter_pids = config.filter_pids;
  skel->rodata->cfg.follow_forks = config.follow_forks;
  programs->holds_forks_ = config.follow_forks && config.hold_forks && KernelHas("bpf_send_signal_task");
  skel->rodata->cfg.hold_forks = programs->holds_forks_;
  if (config.ring_bytes > UINT32_MAX)  // the map's size is 32-bit: never truncated
    return Status::Error("cannot size the ring buffer: " + std::to_string(config.ring_bytes) +
                         " bytes, BPF takes at most 2^31");
  int err = bpf_map__set_max_entries(skel->maps.events, static_cast<uint32_t>(config.ring_bytes));
  if (err) return Status::Error("cannot size the ring buffer: " + Errno(err));

  bpf_program__set_autoload(skel->progs.op_enter, !config.empty_programs);
  bpf_program__set_autoload(skel->progs.boxed_enter, !config.empty_programs);
  bpf_program__set_autoload(skel->progs.op_return, !config.empty_programs);
  bpf_program__set_autoload(skel->progs.cuda_enter, !config.empty_programs);
  bpf_program__set_autoload(skel->progs.on_catch, !config.empty_programs);
  bpf_program__set_autoload(skel->progs.empty_enter, config.empty_programs);
  bpf_program__set_autoload(skel->progs.empty_return,
                            config.empty_programs && !config.empty_uretprobes);
  bpf_program__set_autoload(skel->progs.empty_uret,
                            config.empty_programs && config.empty_uretprobes);
  bpf_program__set_autoload(skel->progs.dl_state, config.watch_loads);
  bpf_program__set_autoload(skel->progs.annot_probe, !config.empty_programs);
  bpf_program__set_autoload(skel->progs.bench_burst, config.synthetic);
  bpf_program__set_autoload(skel->progs.on_fork, config.follow_forks);
  bool uret = config.uretprobe_returns && config.use_uprobe_multi && !config.empty_programs;
  bool memory = config.memory && !config.empty_programs;
  bpf_program__set_autoload(skel->progs.alloc_enter, memory);
  bpf_program__set_autoload(skel->progs.alloc_return, memory);
  bpf_program__set_autoload(skel->progs.free_enter, memory);
  bpf_program__set_autoload(skel->progs.device_report, memory);
  bpf_program__set_autoload(skel->progs.segment_enter, memory);
  bpf_program__set_autoload(skel->progs.segment_return, memory);
  bpf_program__set_autoload(skel->progs.segment_free, memory);
  bpf_program__set_autoload(skel->progs.op_uret, uret);
  bpf_program__set_autoload(skel->progs.on_throw, uret);
  bpf_program__set_autoload(skel->progs.list_returns, uret);
  bpf_program__set_autoload(skel->progs.shapes_enter, config.shapes && !config.empty_programs);
  if (config.use_uprobe_multi) {
    // uprobe_multi links only take programs loaded for that attach type.
    for (bpf_program* prog : {skel->progs.op_enter, skel->progs.boxed_enter,
                              skel->progs.op_return, skel->progs.cuda_enter,
                              skel->progs.on_catch,
                              skel->progs.empty_enter, skel->progs.empty_return,
                              skel->progs.empty_uret, skel->progs.op_uret,
                              skel->progs.on_throw, skel->progs.dl_state,
                              skel->progs.alloc_enter, skel->progs.alloc_return,
                              skel->progs.free_enter, skel->progs.device_report,
                              skel->progs.segment_enter, skel->progs.segment_return,
                              skel->progs.segment_free, skel->progs.annot_probe,
                              skel->progs.shapes_enter}) {
      bpf_program__set_expected_attach_type(
          prog, static_cast<enum bpf_attach_type>(kBpfTraceUprobeMulti));
    }
  }
  err = torchprobe_bpf__load(skel);
  if (err) return Status::Error("cannot load the BPF programs: " + Errno(err));
  // Thread exits and forks are seen through raw tracepoints (no tracefs).
  if (config.follow_forks) {
    skel->links.on_fork = bpf_program__attach(skel->progs.on_fork);
    if (!skel->links.on_fork)
      return Status::Error("cannot attach sched_process_fork: " + Errno(errno));
  }
  skel->links.on_exit = bpf_program__attach(skel->progs.on_exit);
  if (!skel->links.on_exit)
    return Status::Error("cannot attach sched_process_exit: " + Errno(errno));
  skel->links.on_exec = bpf_program__attach(skel->progs.on_exec);
  if (!skel->links.on_exec)
    return Status::Error("cannot attach sched_process_exec: " + Errno(errno));
  return programs;
}

BpfPrograms::~BpfPrograms() { torchprobe_bpf__destroy(skel_); }

bpf_program* BpfPrograms::op_entry() const {
  return config_.empty_programs ? skel_->progs.empty_enter : skel_->progs.op_enter;
}
bpf_program* BpfPrograms::boxed_entry() const {
  return config_.empty_programs ? skel_->progs.empty_enter : skel_->progs.boxed_enter;
}

bpf_program* BpfPrograms::cuda_entry() const {
  return config_.empty_programs ? skel_->progs.empty_enter : skel_->progs.cuda_enter;
}
bpf_program* BpfPrograms::op_return() const {
  if (!config_.empty_programs) return skel_->progs.op_return;
  return config_.empty_uretprobes ? skel_->progs.empty_uret : skel_->progs.empty_return;
}
bpf_program* BpfPrograms::on_catch() const {
  return config_.empty_programs ? nullptr : skel_->progs.on_catch;
}
bpf_program* BpfPrograms::dl_state() const { return skel_->progs.dl_state; }
bpf_program* BpfPrograms::annot_probe() const {
  return config_.empty_programs ? skel_->progs.empty_enter : skel_->progs.annot_probe;
}
bpf_program* BpfPrograms::op_uret() const {
  return bpf_program__fd(skel_->progs.op_uret) >= 0 ? skel_->progs.op_uret : nullptr;
}
bpf_program* BpfPrograms::on_throw() const {
  return bpf_program__fd(skel_->progs.on_throw) >= 0 ? skel_->progs.on_throw : nullptr;
}
int BpfPrograms::fixes_fd() const { return bpf_map__fd(skel_->maps.fixes); }
int BpfPrograms::list_returns_fd() const { return bpf_program__fd(skel_->progs.list_returns); }
namespace {
bpf_program* IfLoaded(bpf_program* prog) { return bpf_program__fd(prog) >= 0 ? prog : nullptr; }
}  // namespace
// With empty programs (the bench floor) the allocator gets them too.
bpf_program* BpfPrograms::MemoryProgram(bpf_program* real, bpf_program* empty) const {
  if (!config_.memory) return nullptr;
  return IfLoaded(config_.empty_programs ? empty : real);
}
bpf_program* BpfPrograms::alloc_enter() const {
  return MemoryProgram(skel_->progs.alloc_enter, skel_->progs.empty_enter);
}
bpf_program* BpfPrograms::alloc_return() const {
  return MemoryProgram(skel_->progs.alloc_return, skel_->progs.empty_return);
}
bpf_program* BpfPrograms::free_enter() const {
  return MemoryProgram(skel_->progs.free_enter, skel_->progs.empty_enter);
}
bpf_program* BpfPrograms::device_report() const {
  return MemoryProgram(skel_->progs.device_report, skel_->progs.empty_enter);
}
bpf_program* BpfPrograms::segment_enter() const {
  return MemoryProgram(skel_->progs.segment_enter, skel_->progs.empty_enter);
}
bpf_program* BpfPrograms::segment_return() const {
  return MemoryProgram(skel_->progs.segment_return, skel_->progs.empty_return);
}
bpf_program* BpfPrograms::shapes_entry() const { return IfLoaded(skel_->progs.shapes_enter); }
Status BpfPrograms::SetTensorLayout(uint32_t pid, const tp_tensor_layout& layout) {
  if (bpf_map__update_elem(skel_->maps.tensor_layouts, &pid, sizeof(pid), &layout, sizeof(layout), BPF_ANY))
    return Status::Error("cannot set the tensor layout of " + std::to_string(pid) + ": " + Errno(errno));
  return Status::Ok();
}
void BpfPrograms::RemoveTensorLayout(uint32_t pid) {
  bpf_map__delete_elem(skel_->maps.tensor_layouts, &pid, sizeof(pid), 0);
}
bpf_program* BpfPrograms::segment_free() const {
  return MemoryProgram(skel_->progs.segment_free, skel_->progs.empty_enter);
}
bpf_program* BpfPrograms::bench_burst() const { return skel_->progs.bench_burst; }
int BpfPrograms::events_fd() const { return bpf_map__fd(skel_->maps.events); }
int BpfPrograms::ctl_events_fd() const { return bpf_map__fd(skel_->maps.ctl_events); }

Status BpfPrograms::AddPid(uint32_t pid) {
  uint8_t one = 1;
  if (bpf_map_update_elem(bpf_map__fd(skel_->maps.pids), &pid, &one, BPF_ANY) != 0)
    return Status::Error("cannot add pid " + std::to_string(pid) + " to the filter: " +
                         Errno(errno));
  return Status::Ok();
}

void BpfPrograms::MarkAttached(uint32_t pid) {
  uint8_t attached = PID_ATTACHED;
  bpf_map_update_elem(bpf_map__fd(skel_->maps.pids), &pid, &attached, BPF_EXIST);  // gone: nothing to mark
}

void BpfPrograms::RemovePid(uint32_t pid) {
  bpf_map_delete_elem(bpf_map__fd(skel_->maps.pids), &pid);
}

int BpfPrograms::ctl_fd() const { return bpf_map__fd(skel_->maps.ctl); }
int BpfPrograms::held_fd() const { return bpf_map__fd(skel_->maps.held); }
int BpfPrograms::gated_hits_fd() const { return bpf_map__fd(skel_->maps.gated_hits); }

namespace {
// Read-modify-write of the one ctl value; only torchprobe's main thread
// writes it while torchprobe lives.
void UpdateCtl(int fd, void (*change)(tp_ctl*, uint32_t), uint32_t value) {
  uint32_t key = 0;
  tp_ctl ctl = {};
  bpf_map_lookup_elem(fd, &key, &ctl);
  change(&ctl, value);
  bpf_map_update_elem(fd, &key, &ctl, BPF_ANY);
}
}  // namespace

void BpfPrograms::SetGate(tp_gate gate) {
  UpdateCtl(ctl_fd(), [](tp_ctl* c, uint32_t v) { c->gate = v; }, gate);
}

void BpfPrograms::SetLoads(tp_loads loads) {
  UpdateCtl(ctl_fd(), [](tp_ctl* c, uint32_t v) { c->loads = v; }, loads);
}

void BpfPrograms::Unhold(uint32_t pid) { bpf_map_delete_elem(held_fd(), &pid); }

std::vector<uint32_t> BpfPrograms::Held() const {
  std::vector<uint32_t> held;
  uint32_t key = 0, next = 0;
  for (const uint32_t* at = nullptr; bpf_map_get_next_key(held_fd(), at, &next) == 0; at = &key) {
    held.push_back(next);
    key = next;
  }
  return held;
}

uint64_t BpfPrograms::Drops(tp_drop_reason reason) const {
  int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) return 0;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpus));
  uint32_t key = reason;
  if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.drops), &key, per_cpu.data()) != 0) return 0;
  uint64_t total = 0;
  for (uint64_t n : per_cpu) total += n;
  return total;
}

}  // namespace torchprobe
