#include "userspace/probe_sets/shapes/shapes_probe_set.h"

#include <memory>

#include "userspace/base/proc_maps.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/tensor_args.h"

namespace torchprobe {

namespace {

constexpr const char* kUndefinedSingleton = "_ZN3c1019UndefinedTensorImpl10_singletonE";

}  // namespace

// What one libc10 image tells, read once per image.
ShapesProbeSet::Libc10 ShapesProbeSet::ReadLibc10(const std::string& path) {
  Libc10 facts;
  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(path);
  if (!image.ok()) return facts;
  facts.layout = DeriveTensorLayout(**image);
  for (const ElfSymbol& symbol : (*image)->DataSymbols())
    if (symbol.name == kUndefinedSingleton) facts.undefined_vaddr = symbol.vaddr;
  for (const LoadSegment& segment : (*image)->segments())
    if (segment.file_size && !facts.backed.file_size) facts.backed = segment;
  return facts;
}

// c10::UndefinedTensorImpl::_singleton's address in the process (it is in
// .bss: placed by the image's load bias, found from a file-backed segment);
// 0 when not found.
uint64_t ShapesProbeSet::UndefinedImplAddress(const Libc10& facts, const MappedImage& mapped) {
  if (!facts.undefined_vaddr || !facts.backed.file_size) return 0;
  std::optional<uint64_t> at = MappedAddress(mapped, facts.backed.offset);
  return at ? *at - facts.backed.vaddr + facts.undefined_vaddr : 0;
}

ShapesProbeSet::ShapesProbeSet(const OpTable* ops, bool identity)
    : model_(ops, [](const OpInfo& op) { return SchemaArgsOf(op.schema); }), identity_(identity) {}

Status ShapesProbeSet::Attach(const TracedProcess& process) {
  if (!context_.bpf->Program("shapes_enter")) return Status::Ok();
  auto has = with_layout_.find(process.pid);
  if (has != with_layout_.end()) {
    // Launched, a process is attached when libtorch is mapped but not yet
    // relocated: its tls_index is filled in by a later library load.
    if (!has->second.seq_module) return SetLayout(process, has->second);
    return Status::Ok();
  }
  StatusOr<MappedImage> libc10 = FindMappedImage(process.pid, "libc10.so");
  std::optional<TensorLayout> layout;
  uint64_t undefined = 0;
  if (libc10.ok()) {
    std::string identity = ImageIdentity(libc10->host_path);
    auto known = libc10s_.find(identity);
    if (known == libc10s_.end()) known = libc10s_.emplace(identity, ReadLibc10(libc10->host_path)).first;
    layout = known->second.layout;
    undefined = UndefinedImplAddress(known->second, *libc10);
  }
  // Without a layout its entries stay plain (shapes_enter finds none): counted.
  if (!layout) {
    ++without_layout_;
    return Status::Ok();
  }
  if (undefined) model_.SetUndefinedImpl(process.pid, undefined);
  return SetLayout(process, {layout->sizes_and_strides, layout->storage_offset, layout->dtype,
                             identity_ ? layout->storage : 0, 0, 0});
}

Status ShapesProbeSet::SetLayout(const TracedProcess& process, tp_tensor_layout layout) {
  if (std::optional<SequenceNumberPlace> seq = SequencePlace(process)) {
    layout.seq_module = seq->module;
    layout.seq_offset = seq->offset;
  }
  // What shapes_enter reads Tensors with, by pid (bpf/shapes.bpf.c).
  Status status = context_.bpf->UpdateMap("tensor_layouts", process.pid, layout);
  if (status.ok()) with_layout_[process.pid] = layout;
  return status;
}

std::optional<SequenceNumberPlace> ShapesProbeSet::SequencePlace(const TracedProcess& process) {
  StatusOr<MappedImage> libtorch = FindMappedImage(process.pid, "libtorch_cpu.so");
  if (!libtorch.ok()) return std::nullopt;
  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(libtorch->host_path);
  if (!image.ok()) return std::nullopt;
  auto known = sequence_tls_.find(process.torch_identity);
  if (known == sequence_tls_.end())
    known = sequence_tls_.emplace(process.torch_identity, FindSequenceNumberTls(**image)).first;
  if (!known->second) return std::nullopt;
  return FindSequenceNumberPlace(process.pid, *libtorch, **image, *known->second);
}

void ShapesProbeSet::Release(uint32_t pid) {
  auto it = with_layout_.find(pid);
  if (it == with_layout_.end()) return;
  without_sequence_ += it->second.seq_module == 0;
  with_layout_.erase(it);
  model_.Forget(pid);
  context_.bpf->DeleteFromMap("tensor_layouts", pid);
}

void ShapesProbeSet::LayOutOp(const OpProbe& probe, tp_op_layout& layout) const {
  uint32_t places = TensorPlaceCookieOf(probe.symbol.c_str(), probe.op.schema);
  for (int t = 0; t < TP_SHAPES_TENSORS; ++t) layout.tensor_places[t] = static_cast<uint8_t>(places >> (8 * t));
}

void ShapesProbeSet::Wire(const ModelWiring& wiring) { model_.SetModel(wiring.model); }

void ShapesProbeSet::FillStats(TraceStats& stats) {
  stats.shapes_traced = 1;
  stats.shapes_without_layout = without_layout_;
  stats.sequence_numbers_unplaced = without_sequence_;
  for (const auto& [pid, layout] : with_layout_) stats.sequence_numbers_unplaced += layout.seq_module == 0;
}

std::string ShapesProbeSet::Summary(const TraceStats& stats) const { return "shapes: " + ShapesStatsText(stats); }

}  // namespace torchprobe
