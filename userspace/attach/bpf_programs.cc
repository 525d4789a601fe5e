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
#include "userspace/attach/kernel_btf.h"
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
// The quick walk first; libbpf's full parse only where the walk cannot say.
bool KernelHas(const char* kfunc) {
  int quick = KernelBtfHasFunc(kfunc);
  if (quick >= 0) return quick == 1;
  btf* kernel = btf__load_vmlinux_btf();
  if (!kernel) return false;
  bool found = btf__find_by_name_kind(kernel, kfunc, BTF_KIND_FUNC) > 0;
  btf__free(kernel);
  return found;
}

// The core programs of the object: when each loads, and what stands in for
// it with empty programs ("" none: it is not attached then). The probe sets'
// programs load when a set asks for them (BpfConfig::programs).
struct ProgramRule {
  const char* name;
  bool (*wanted)(const BpfConfig&);
  const char* empty = nullptr;  // its stand-in with empty programs, "" none
};
bool Always(const BpfConfig&) { return true; }
bool UretReturns(const BpfConfig& c) { return c.uretprobe_returns && c.use_uprobe_multi; }
constexpr ProgramRule kPrograms[] = {
    {"op_enter", Always, "empty_enter"},  // ops.bpf.c
    {"op_return", Always, "empty_return"},
    {"on_catch", Always, ""},
    {"op_uret", UretReturns, ""},  // uretprobe_returns.bpf.c
    {"on_throw", UretReturns, ""},
    {"list_returns", UretReturns, ""},
    {"dl_state", [](const BpfConfig& c) { return c.watch_loads; }},  // procs.bpf.c
    {"on_fork", [](const BpfConfig& c) { return c.follow_forks; }},
    {"on_exec", Always},
    {"on_exit", Always},
    {"empty_enter", [](const BpfConfig& c) { return c.empty_programs; }},  // bench.bpf.c
    {"empty_return", [](const BpfConfig& c) { return c.empty_programs && !c.empty_uretprobes; }},
    {"empty_uret", [](const BpfConfig& c) { return c.empty_programs && c.empty_uretprobes; }},
    {"bench_burst", [](const BpfConfig& c) { return c.synthetic; }},
};

const ProgramRule* FindRule(std::string_view name) {
  for (const ProgramRule& rule : kPrograms)
    if (name == rule.name) return &rule;
  return nullptr;
}

// Whether the program `name` loads under `config` (a core rule's say, or a
// set asked for it), and what stands in for it with empty programs
// (nullptr: nothing, it loads then too; "": none, it is not attached then).
struct Choice {
  bool wanted = false;
  const char* empty = nullptr;
};
Choice ChoiceOf(std::string_view name, const BpfConfig& config) {
  if (const ProgramRule* rule = FindRule(name)) return {rule->wanted(config), rule->empty};
  auto asked = config.programs.find(std::string(name));
  if (asked != config.programs.end()) return {true, asked->second.c_str()};
  return {};  // no set asked for it
}

bpf_program* IfLoaded(bpf_program* prog) { return prog && bpf_program__fd(prog) >= 0 ? prog : nullptr; }

}  // namespace

StatusOr<std::unique_ptr<BpfPrograms>> BpfPrograms::Load(const BpfConfig& config) {
  libbpf_set_print(QuietLibbpf);
  std::unique_ptr<BpfPrograms> programs(new BpfPrograms(config));
  torchprobe_bpf* skel = torchprobe_bpf__open();
  if (!skel) return Status::Error("cannot open the BPF object: " + Errno(errno));
  programs->skel_ = skel;

  skel->rodata->cfg.filter_pids = config.filter_pids;
  skel->rodata->cfg.follow_forks = config.follow_forks;
  skel->rodata->cfg.python_stacks = config.python_stacks && !config.empty_programs;
  programs->holds_forks_ = config.follow_forks && config.hold_forks && KernelHas("bpf_send_signal_task");
  skel->rodata->cfg.hold_forks = programs->holds_forks_;
  if (config.ring_bytes > UINT32_MAX)  // the map's size is 32-bit: never truncated
    return Status::Error("cannot size the ring buffer: " + std::to_string(config.ring_bytes) +
                         " bytes, BPF takes at most 2^31");
  int err = bpf_map__set_max_entries(skel->maps.events, static_cast<uint32_t>(config.ring_bytes));
  if (err) return Status::Error("cannot size the ring buffer: " + Errno(err));

  for (const ProgramRule& rule : kPrograms)
    if (!bpf_object__find_program_by_name(skel->obj, rule.name))
      return Status::Error(std::string("the BPF object has no program ") + rule.name);
  for (const auto& [name, empty] : config.programs)
    if (!bpf_object__find_program_by_name(skel->obj, name.c_str()))
      return Status::Error("the BPF object has no program " + name);
  bpf_program* each;
  bpf_object__for_each_program(each, skel->obj) {
    Choice choice = ChoiceOf(bpf_program__name(each), config);
    // With empty programs, a program that has a stand-in is not loaded.
    bpf_program__set_autoload(each, choice.wanted && !(config.empty_programs && choice.empty));
  }
  if (config.use_uprobe_multi) {
    // uprobe_multi links only take programs loaded for that attach type:
    // every uprobe and uretprobe program (the kprobe program type).
    bpf_program* prog;
    bpf_object__for_each_program(prog, skel->obj) {
      if (bpf_program__type(prog) == BPF_PROG_TYPE_KPROBE)
        bpf_program__set_expected_attach_type(prog, static_cast<enum bpf_attach_type>(kBpfTraceUprobeMulti));
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

bpf_program* BpfPrograms::Program(std::string_view name) const {
  Choice choice = ChoiceOf(name, config_);
  if (!choice.wanted) return nullptr;
  std::string chosen(name);
  if (config_.empty_programs && choice.empty) {
    if (!*choice.empty) return nullptr;
    // The op returns' floor is the uretprobe one when the bench asks for it.
    chosen = name == "op_return" && config_.empty_uretprobes ? "empty_uret" : choice.empty;
  }
  return IfLoaded(bpf_object__find_program_by_name(skel_->obj, chosen.c_str()));
}
bpf_map* BpfPrograms::FindMap(std::string_view name) const {
  return bpf_object__find_map_by_name(skel_->obj, std::string(name).c_str());
}
int BpfPrograms::MapFd(std::string_view name) const {
  bpf_map* map = FindMap(name);
  return map ? bpf_map__fd(map) : -1;
}
Status BpfPrograms::Update(std::string_view name, const void* key, size_t key_size, const void* value,
                           size_t value_size) {
  bpf_map* map = FindMap(name);
  if (!map) return Status::Error("the BPF object has no map " + std::string(name));
  if (bpf_map__update_elem(map, key, key_size, value, value_size, BPF_ANY))
    return Status::Error("cannot update BPF map " + std::string(name) + ": " + Errno(errno));
  return Status::Ok();
}
bool BpfPrograms::Lookup(std::string_view name, const void* key, size_t key_size, void* value,
                         size_t value_size) const {
  bpf_map* map = FindMap(name);
  return map && bpf_map__lookup_elem(map, key, key_size, value, value_size, 0) == 0;
}
void BpfPrograms::Delete(std::string_view name, const void* key, size_t key_size) {
  if (bpf_map* map = FindMap(name)) bpf_map__delete_elem(map, key, key_size, 0);
}
Status BpfPrograms::SetOpLayout(uint32_t op_id, const tp_op_layout& layout) {
  if (op_id >= TP_MAX_OPS)
    return Status::Error("cannot set the layout of op " + std::to_string(op_id) + ": past the " +
                         std::to_string(TP_MAX_OPS) + " op ids BPF keeps");
  if (bpf_map__update_elem(skel_->maps.op_layouts, &op_id, sizeof(op_id), &layout, sizeof(layout), BPF_ANY))
    return Status::Error("cannot set the layout of op " + std::to_string(op_id) + ": " + Errno(errno));
  return Status::Ok();
}
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

uint64_t BpfPrograms::AllDrops() const {
  uint64_t total = 0;
  for (uint32_t reason = 0; reason < DROP_NR; ++reason) total += Drops(static_cast<tp_drop_reason>(reason));
  return total;
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
