#include "userspace/session/shapes_probe_set.h"

#include <memory>

#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/proc_maps.h"
#include "userspace/discover/tensor_args.h"

namespace torchprobe {

namespace {

std::optional<TensorLayout> LayoutOf(const std::string& libc10_path) {
  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(libc10_path);
  if (!image.ok()) return std::nullopt;
  return DeriveTensorLayout(**image);
}

}  // namespace

ShapesProbeSet::ShapesProbeSet(const OpTable* ops)
    : model_(ops, [](const OpInfo& op) { return SchemaArgsOf(op.schema); }) {}

Status ShapesProbeSet::Attach(const TracedProcess& process) {
  if (with_layout_.count(process.pid) || !context_.bpf->shapes_entry()) return Status::Ok();
  StatusOr<MappedImage> libc10 = FindMappedImage(process.pid, "libc10.so");
  std::optional<TensorLayout> layout;
  if (libc10.ok()) {
    std::string identity = ImageIdentity(libc10->host_path);
    auto known = layouts_.find(identity);
    if (known == layouts_.end()) known = layouts_.emplace(identity, LayoutOf(libc10->host_path)).first;
    layout = known->second;
  }
  // Without a layout its entries stay plain (shapes_enter finds none): counted.
  if (!layout) {
    ++without_layout_;
    return Status::Ok();
  }
  tp_tensor_layout l{layout->sizes_and_strides, layout->storage_offset, layout->dtype, 0};
  Status status = context_.bpf->SetTensorLayout(process.pid, l);
  if (!status.ok()) return status;
  with_layout_.insert(process.pid);
  return Status::Ok();
}

void ShapesProbeSet::Release(uint32_t pid) {
  if (with_layout_.erase(pid)) context_.bpf->RemoveTensorLayout(pid);
}

void ShapesProbeSet::Wire(const ModelWiring& wiring) { model_.SetModel(wiring.model); }

void ShapesProbeSet::FillStats(TraceStats& stats) {
  stats.shapes_traced = 1;
  stats.shapes_without_layout = without_layout_;
}

std::string ShapesProbeSet::Summary(const TraceStats& stats) const {
  uint64_t tensors = stats.tensor_args_read + stats.tensor_args_unplaced + stats.tensor_args_past_limit +
                     stats.tensor_args_unreadable + stats.tensor_args_cut;
  std::string line = "shapes: " + std::to_string(stats.tensor_args_read) + " of " + std::to_string(tensors) +
                     " Tensor arguments read";
  if (tensors > stats.tensor_args_read)
    line += " (" + std::to_string(stats.tensor_args_unplaced) + " not placed, " +
            std::to_string(stats.tensor_args_past_limit) + " past the first " + std::to_string(TP_SHAPES_TENSORS) +
            ", " + std::to_string(stats.tensor_args_unreadable) + " unreadable, " +
            std::to_string(stats.tensor_args_cut) + " with more than " + std::to_string(TP_SHAPES_DIMS) + " dims)";
  if (without_layout_) line += "; " + std::to_string(without_layout_) + " processes without a TensorImpl layout";
  return line;
}

}  // namespace torchprobe
