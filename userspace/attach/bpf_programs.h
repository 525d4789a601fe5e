// The loaded BPF object: open -> configure rodata and attach types -> load,
// programs by name and typed access to its maps. Destroying it unloads everything.
#ifndef TORCHPROBE_ATTACH_BPF_PROGRAMS_H
#define TORCHPROBE_ATTACH_BPF_PROGRAMS_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bpf/events.h"
#include "userspace/base/status.h"

struct torchprobe_bpf;
struct bpf_map;
struct bpf_program;

namespace torchprobe {

struct BpfConfig {
  bool use_uprobe_multi = true;  // else per-symbol uprobes
  bool empty_programs = false;   // attach no-op programs (the cost floor)
  bool empty_uretprobes = false; // ... returning through uretprobes (bench only)
  bool filter_pids = false;      // check the pids map in op programs
  bool follow_forks = false;     // add forked children to the pids map
  bool hold_forks = false;       // ... each held stopped until attached (where the kernel can)
  bool watch_loads = false;      // load dl_state (launch mode)
  bool synthetic = false;        // load bench_burst (make bench)
  bool uretprobe_returns = false;  // load op_uret, on_throw, list_returns (needs uprobe_multi)
  bool python_stacks = false;    // op and range entries walk the Python stack (bpf/python_stack.bpf.h)
  // The programs probe sets load beside the core ones (ops, returns,
  // processes: the table in bpf_programs.cc), each with the no-op program
  // that stands in for it under empty_programs ("": none, not attached
  // then). A set asks for its own in its Configure (Want).
  std::map<std::string, std::string> programs;
  void Want(const std::string& name, const std::string& empty_stand_in = "") { programs[name] = empty_stand_in; }
  uint64_t ring_bytes = 64u << 20;  // op ring buffer size, a power of 2 up to kMaxRingBytes
};

class BpfPrograms {
 public:
  static StatusOr<std::unique_ptr<BpfPrograms>> Load(const BpfConfig& config);
  ~BpfPrograms();
  BpfPrograms(const BpfPrograms&) = delete;
  BpfPrograms& operator=(const BpfPrograms&) = delete;

  const BpfConfig& config() const { return config_; }
  // Forked children are held stopped at their fork until userspace resumes
  // them: asked for (hold_forks) and the kernel can (bpf_send_signal_task,
  // Linux 6.13+; without it, children run untraced until attached).
  bool holds_forks() const { return holds_forks_; }
  // The program named `name` (a SEC function of bpf/*.bpf.c, e.g.
  // "op_enter", "alloc_return"), as the caller should attach it: null when
  // its capability is not loaded (--memory's, --shapes', the uretprobe
  // route's); with empty programs (the cost floor `make bench` measures
  // against), the no-op program on the same kind of point (empty_enter,
  // empty_return or empty_uret), or null for one that has none (on_catch,
  // shapes_enter, op_uret, on_throw).
  bpf_program* Program(std::string_view name) const;
  // The map named `name` (a map of bpf/*.bpf.c, e.g. "fixes",
  // "tensor_layouts"): its fd, or -1 when the object has none.
  int MapFd(std::string_view name) const;
  // One entry of that map set or deleted (an error names the map and why).
  template <class Key, class Value>
  Status UpdateMap(std::string_view name, const Key& key, const Value& value) {
    return Update(name, &key, sizeof(key), &value, sizeof(value));
  }
  template <class Key>
  void DeleteFromMap(std::string_view name, const Key& key) {
    Delete(name, &key, sizeof(key));
  }
  // False when `key` is not in the map (or there is no such map).
  template <class Key, class Value>
  bool LookupInMap(std::string_view name, const Key& key, Value* value) const {
    return Lookup(name, &key, sizeof(key), value, sizeof(*value));
  }
  // What the entry programs that read an op's arguments (boxed, collective,
  // autograd node and shapes entries) need to find them, by op id: set
  // before the op's probe is attached (bpf/events.h tp_op_layout).
  Status SetOpLayout(uint32_t op_id, const tp_op_layout& layout);
  int events_fd() const;
  int ctl_events_fd() const;
  // Maps the keeper needs if torchprobe dies: the gate, held processes and
  // gated hit counts (see bpf/common.bpf.h).
  int ctl_fd() const;
  int held_fd() const;
  int gated_hits_fd() const;

  Status AddPid(uint32_t pid);
  // `pid`'s libtorch is attached: in launch mode its library loads are no
  // longer held (until it execs: then BPF holds it again).
  void MarkAttached(uint32_t pid);
  void RemovePid(uint32_t pid);
  void SetGate(tp_gate gate);
  void SetLoads(tp_loads loads);
  // A process stopped at a library load or its fork was resumed: no one else need.
  void Unhold(uint32_t pid);
  // Every process still held (stopped by a probe, not resumed yet).
  std::vector<uint32_t> Held() const;
  // Sum over CPUs of the drops counted for `reason`.
  uint64_t Drops(tp_drop_reason reason) const;
  // ... for every reason.
  uint64_t AllDrops() const;

 private:
  explicit BpfPrograms(const BpfConfig& config) : config_(config) {}
  bpf_map* FindMap(std::string_view name) const;
  Status Update(std::string_view name, const void* key, size_t key_size, const void* value, size_t value_size);
  void Delete(std::string_view name, const void* key, size_t key_size);
  bool Lookup(std::string_view name, const void* key, size_t key_size, void* value, size_t value_size) const;
  BpfConfig config_;
  torchprobe_bpf* skel_ = nullptr;
  bool holds_forks_ = false;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_BPF_PROGRAMS_H
