// The ops probe set: what makes a process traced. It plans each libtorch
// image once (discover/op_probes, with the op ids it appends to the op
// table), attaches every op's entry and return on a process (after the
// catch probe and the return route's guard, return_guard.h), then the
// images traced beside libtorch (op_images.h); it owns the BPF programs of
// ops, boxed calls, collectives and autograd nodes (bpf/ops.bpf.c,
// boxed.bpf.c, collectives.bpf.c, autograd.bpf.c, uretprobe_returns.bpf.c)
// and the models in front of the op model that name what the probes cannot
// (model/autograd_model, then model/boxed_model). The probes' own cost is
// calibrated beside the attach (probe_calibration.h).
#ifndef TORCHPROBE_PROBE_SETS_OPS_OPS_PROBE_SET_H
#define TORCHPROBE_PROBE_SETS_OPS_OPS_PROBE_SET_H

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "userspace/discover/address_symbols.h"
#include "userspace/model/autograd_model.h"
#include "userspace/model/boxed_model.h"
#include "userspace/probe_sets/ops/op_images.h"
#include "userspace/probe_sets/ops/probe_calibration.h"
#include "userspace/probe_sets/ops/return_guard.h"
#include "userspace/probe_sets/probe_set.h"

namespace torchprobe {

struct OpsOptions {
  std::string returns = "auto";   // --returns auto|uretprobe|ret
  bool empty_probes = false;      // --empty-probes: no calibration (the bench's floor)
  bool empty_uretprobes = false;  // --empty-probes=uretprobe: the floor returns through uretprobes
  bool quiet = false;
  // Only the ops this says yes to are probed (unset: every op): the flight
  // recorder's light tier.
  std::function<bool(const OpProbe&)> probe_only;
};

class OpsProbeSet : public ProbeSet {
 public:
  // Appends the op ids of each image it plans to `ops`.
  OpsProbeSet(OpsOptions options, OpTable* ops);

  // The sets that read each libtorch op's arguments at its entry (shapes):
  // asked for their entry program and the op's layout as images attach.
  void SetOpReaders(std::vector<const ProbeSet*> readers) { readers_ = std::move(readers); }
  // Plans `libtorch` (once per image) before anything is loaded: a build
  // without ops is one line then.
  Status Plan(const MappedImage& libtorch);
  // Loads the BPF object `config` asks for, with the op returns' programs
  // where this kernel loads them (else every process returns through `ret`
  // probes, and why is said per process).
  StatusOr<std::unique_ptr<BpfPrograms>> Load(BpfConfig config);
  // Attaches `process`' libtorch ops (the catch probe and the guard first):
  // true once they are live, false when the process went away meanwhile.
  StatusOr<bool> AttachTorch(const TracedProcess& process);
  // The identity of the libtorch whose ops are live for `pid`; "" when none
  // (not yet, or its program was released).
  std::string TorchOf(uint32_t pid) const {
    auto it = processes_.find(pid);
    return it == processes_.end() ? "" : it->second.torch;
  }

  // The entries that read more than an op id (bpf/boxed.bpf.c, cuda.bpf.c,
  // collectives.bpf.c, autograd.bpf.c); op_enter and the returns are the
  // object's core.
  void Configure(BpfConfig& config) const override {
    for (const char* entry : {"boxed_enter", "cuda_enter", "collective_enter", "autograd_enter"})
      config.Want(entry, "empty_enter");
  }
  void SetContext(const ProbeSetContext& context) override;
  void Route(EventRouter& router) override;
  void RouteLate(EventRouter& router) override;
  // The images beside libtorch, each once (a library load may bring one).
  Status Attach(const TracedProcess& process) override;
  void Release(uint32_t pid) override;
  void ThreadExited(uint32_t pid, uint32_t tid) override;
  void Wire(const ModelWiring& wiring) override;
  void FillStats(TraceStats& stats) override;
  std::string Summary(const TraceStats& stats) const override;
  void BeforeRemoval() override;
  void AfterRemoval() override { guard_.ReleaseAll(); }

 private:
  // One ELF image, planned once however many processes map it.
  struct ImagePlan {
    OpProbeSet probes;
    uint32_t first_op_id = 0;
    const ProbeImage* kind = &kTorchImage;
  };
  struct Process {
    std::string torch;               // identity of the libtorch attached
    ProbeLinks ops, catcher;         // its links on libtorch and libstdc++
    std::set<std::string> beside;    // identities of the other images attached
    std::vector<ProbeLinks> extra;   // ... their links
  };
  StatusOr<const ImagePlan*> PlanImage(const MappedImage& image, const std::string& identity,
                                       const ProbeImage& kind);
  // Probe links on `path` for `pid`, every op of `plan`.
  StatusOr<ProbeLinks> AttachOps(const ImagePlan& plan, const std::string& path, int pid, bool uretprobes);
  // An op's entry carried inside a larger event: into the models as one.
  void Enter(const tp_op_event& op) { autograd_->OnOpEvent(EventRouter::EntryOf(op)); }
  // libstdc++'s __cxa_begin_catch for `pid`; empty links when there is none.
  ProbeLinks AttachCatch(uint32_t pid);

  OpsOptions options_;
  OpTable* ops_;
  std::vector<const ProbeSet*> readers_;
  ReturnGuard guard_;
  ProbeCalibration calibration_;
  std::map<std::string, ImagePlan> images_;  // by image identity (dev:inode)
  std::map<uint32_t, Process> processes_;    // by pid
  OpStackModel* model_ = nullptr;            // the window's
  std::function<void()> ops_grew_;
  std::unique_ptr<BoxedModel> boxed_;        // in front of the op model: names boxed calls
  std::unique_ptr<AutogradModel> autograd_;  // in front of boxed_: names the engine's calls
  AddressSymbols vtable_symbols_{true};      // autograd nodes' vtables -> their classes
  uint64_t attach_ns_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_OPS_OPS_PROBE_SET_H
