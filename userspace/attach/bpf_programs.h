// The loaded BPF object: open -> configure rodata and attach types -> load,
// and typed access to its maps. Destroying it unloads everything.
#ifndef TORCHPROBE_ATTACH_BPF_PROGRAMS_H
#define TORCHPROBE_ATTACH_BPF_PROGRAMS_H

#include <cstdint>
#include <memory>
#include <vector>

#include "bpf/events.h"
#include "userspace/base/status.h"

struct torchprobe_bpf;
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
  bool memory = false;           // load the allocator programs (--memory)
  bool shapes = false;           // load shapes_enter (--shapes)
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
  // The programs to attach at op entry and return (op_* or empty_*).
  bpf_program* op_entry() const;
  bpf_program* op_return() const;
  // At the entry of the copies of Dispatcher::callBoxed (boxed_enter or empty_enter).
  bpf_program* boxed_entry() const;
  // At CUDA/NCCL call entry: op_entry's event with the call's arguments.
  bpf_program* cuda_entry() const;
  // On libstdc++'s __cxa_begin_catch; null with empty programs.
  bpf_program* on_catch() const;
  bpf_program* dl_state() const;
  // record_function ranges (bpf/annotations.bpf.h); empty_enter with empty
  // programs (the floor `make bench` measures annotations against).
  bpf_program* annot_probe() const;
  // Uretprobe returns (bpf/uretprobe_returns.bpf.h); null unless loaded.
  bpf_program* op_uret() const;
  bpf_program* on_throw() const;
  int fixes_fd() const;
  int list_returns_fd() const;
  // libc10's CPU allocator (bpf/allocator.bpf.h), or the empty programs
  // with empty_programs; null unless loaded (--memory).
  bpf_program* alloc_enter() const;
  bpf_program* alloc_return() const;
  bpf_program* free_enter() const;
  bpf_program* device_report() const;  // c10::reportMemoryUsageToProfiler
  // The CUDA runtime's cudaMalloc (entry, `ret`s) and cudaFree.
  bpf_program* segment_enter() const;
  bpf_program* segment_return() const;
  bpf_program* segment_free() const;
  bpf_program* bench_burst() const;
  // op_entry with the Tensor arguments' shapes (bpf/shapes.bpf.h); null
  // unless loaded (--shapes) or with empty programs.
  bpf_program* shapes_entry() const;
  // The TensorImpl offsets of process `pid`, which shapes_entry reads with;
  // without them its entries are plain.
  Status SetTensorLayout(uint32_t pid, const tp_tensor_layout& layout);
  void RemoveTensorLayout(uint32_t pid);
  int events_fd() const;
  int ctl_events_fd() const;
  // Maps the keeper needs if torchprobe dies: the gate, held processes and
  // gated hit counts (see bpf/maps.bpf.h).
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

 private:
  explicit BpfPrograms(const BpfConfig& config) : config_(config) {}
  bpf_program* MemoryProgram(bpf_program* real, bpf_program* empty) const;
  BpfConfig config_;
  torchprobe_bpf* skel_ = nullptr;
  bool holds_forks_ = false;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_BPF_PROGRAMS_H
