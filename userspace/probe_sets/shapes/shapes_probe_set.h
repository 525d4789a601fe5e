// The --shapes probe set (record_shapes=True from outside): libtorch's op
// entries go through shapes_enter instead of op_enter (OpEntryProgram: the
// ops set attaches it, with each op's Tensor argument places from LayOutOp,
// discover/tensor_args), this set gives BPF each process' TensorImpl layout
// (discover/tensor_layout, from the libc10 it maps) and turns the entries'
// metadata into the slices' inputs (model/shapes_model). A process whose
// layout cannot be derived gets plain entries, counted. The same entries
// carry the thread's autograd sequence number, where its TLS place is found
// (discover/sequence_number).
#ifndef TORCHPROBE_PROBE_SETS_SHAPES_PROBE_SET_H
#define TORCHPROBE_PROBE_SETS_SHAPES_PROBE_SET_H

#include <map>
#include <optional>
#include <string>

#include "userspace/discover/sequence_number.h"
#include "userspace/discover/tensor_layout.h"
#include "userspace/model/shapes_model.h"
#include "userspace/probe_sets/probe_set.h"

namespace torchprobe {

class ShapesProbeSet : public ProbeSet {
 public:
  // `identity` (--memory): also each Tensor's storage and version, which
  // join the ops to the allocations (the memory categories).
  ShapesProbeSet(const OpTable* ops, bool identity);

  void Configure(BpfConfig& config) const override { config.Want("shapes_enter"); }  // no stand-in: the floor's op entry
  const char* OpEntryProgram() const override { return "shapes_enter"; }
  void LayOutOp(const OpProbe& probe, tp_op_layout& layout) const override;
  Status Attach(const TracedProcess& process) override;
  void Release(uint32_t pid) override;
  void Wire(const ModelWiring& wiring) override;
  void FillStats(TraceStats& stats) override;
  std::string Summary(const TraceStats& stats) const override;
  // After the entry (routed by the ops set before the sets): the shapes
  // fill the slice it opened.
  void Route(EventRouter& router) override {
    router.On<tp_op_shapes_event>({EV_OP_SHAPES}, [this](const tp_op_shapes_event& event) { model_.OnShapes(event); });
  }

 private:
  ShapesModel model_;
  bool identity_;
  // What a libc10 image tells: its TensorImpl layout and where its
  // UndefinedTensorImpl singleton is (with a file-backed segment to place it).
  struct Libc10 {
    std::optional<TensorLayout> layout;
    uint64_t undefined_vaddr = 0;
    LoadSegment backed;
  };
  static Libc10 ReadLibc10(const std::string& path);
  static uint64_t UndefinedImplAddress(const Libc10& facts, const MappedImage& mapped);
  std::map<std::string, Libc10> libc10s_;  // by libc10 identity
  std::map<std::string, std::optional<SequenceNumberTls>> sequence_tls_;  // by libtorch identity
  std::map<uint32_t, tp_tensor_layout> with_layout_;  // what BPF reads with, by pid
  // Gives BPF `layout` for `process`, with its sequence number's place if found.
  Status SetLayout(const TracedProcess& process, tp_tensor_layout layout);
  // Where `process`' threads keep their sequence number; nullopt if not found.
  std::optional<SequenceNumberPlace> SequencePlace(const TracedProcess& process);

  uint64_t without_layout_ = 0;  // processes whose TensorImpl layout was not found
  uint64_t without_sequence_ = 0;  // ... released without their sequence number's place
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_SHAPES_PROBE_SET_H
