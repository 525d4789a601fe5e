// Tensor metadata at op entry -> the slice's OpInputs; see the header.
#include "userspace/model/shapes_model.h"
#include "userspace/base/counted.h"
#include "userspace/base/scalar_types.h"

#include <iterator>
#include <memory>
#include <utility>

namespace torchprobe {

std::string ShapesStatsText(const TraceStats& s) {
  uint64_t tensors =
      s.tensor_args_read + s.tensor_args_unplaced + s.tensor_args_past_limit + s.tensor_args_unreadable + s.tensor_args_cut;
  std::string line = std::to_string(s.tensor_args_read) + " of " + std::to_string(tensors) + " Tensor arguments read";
  if (tensors > s.tensor_args_read)
    line += " (" + std::to_string(s.tensor_args_unplaced) + " not placed, " + std::to_string(s.tensor_args_past_limit) +
            " past the first " + std::to_string(TP_SHAPES_TENSORS) + ", " + std::to_string(s.tensor_args_unreadable) +
            " unreadable, " + std::to_string(s.tensor_args_cut) + " with more than " + std::to_string(TP_SHAPES_DIMS) +
            " dims)";
  if (s.shapes_unattached) line += "; " + std::to_string(s.shapes_unattached) + " entries' shapes without a slice";
  if (s.sequence_numbers_unread)
    line += "; " + std::to_string(s.sequence_numbers_unread) + " sequence numbers unread";
  if (s.sequence_numbers_unplaced)
    line += "; " + Counted(s.sequence_numbers_unplaced, "process", "processes") + " without sequence numbers";
  if (s.shapes_without_layout)
    line += "; " + Counted(s.shapes_without_layout, "process", "processes") + " without a TensorImpl layout";
  return line;
}

ShapesModel::ShapesModel(const OpTable* ops, SchemaArgsFn schema_args)
    : ops_(ops), schema_args_(std::move(schema_args)) {}

const std::vector<SchemaArg>* ShapesModel::ArgsOf(uint32_t op_id) {
  if (op_id >= ops_->size()) return nullptr;
  if (op_id >= args_.size()) {
    args_.resize(ops_->size());
    args_known_.resize(ops_->size(), false);
  }
  if (!args_known_[op_id]) {
    args_[op_id] = schema_args_((*ops_)[op_id]);
    args_known_[op_id] = true;
  }
  return args_[op_id] ? &*args_[op_id] : nullptr;
}

uint64_t ShapesModel::TensorId(uint32_t pid, uint64_t impl) {
  auto [it, inserted] = tensor_ids_.try_emplace(impl ^ (uint64_t{pid} << 48), next_tensor_id_);
  if (inserted) ++next_tensor_id_;
  return it->second;
}

std::optional<OpInputs> ShapesModel::Build(const tp_op_shapes_event& event, TraceStats& stats) {
  const std::vector<SchemaArg>* args = ArgsOf(event.op.op_id);
  if (!args) return std::nullopt;
  OpInputs inputs;
  if (event.sequence_nr == TP_SEQ_UNREAD) ++stats.sequence_numbers_unread;
  else inputs.sequence_number = static_cast<int64_t>(event.sequence_nr);
  size_t tensor = 0;
  for (const SchemaArg& arg : *args) {
    OpInput in;
    if (!arg.tensor) {
      in.type = arg.scalar ? "Scalar" : "";
      inputs.args.push_back(std::move(in));
      continue;
    }
    in.kind = OpInput::kTensorUnknown;
    size_t index = tensor++;
    if (index >= TP_SHAPES_TENSORS) {
      ++stats.tensor_args_past_limit;
      inputs.args.push_back(std::move(in));
      continue;
    }
    const tp_tensor_meta& t = event.tensors[index];
    auto undefined = undefined_.find(event.op.hdr.pid);
    bool undefined_tensor = undefined != undefined_.end() && t.impl && t.impl == undefined->second;
    if (t.status == TENSOR_ABSENT || undefined_tensor) {  // None, or undefined: as the profiler writes it, no type, no dims
      in.kind = OpInput::kOther;
      inputs.args.push_back(std::move(in));
      continue;
    }
    if (t.status == TENSOR_NOT_READ) ++stats.tensor_args_unplaced;
    else if (t.status == TENSOR_UNREADABLE) ++stats.tensor_args_unreadable;
    else if (t.status == TENSOR_TOO_MANY_DIMS) ++stats.tensor_args_cut;
    if (t.status != TENSOR_READ || t.dims > TP_SHAPES_DIMS) {
      inputs.args.push_back(std::move(in));
      continue;
    }
    ++stats.tensor_args_read;
    in.kind = OpInput::kTensor;
    in.type = ScalarTypeCaffe2Name(t.dtype);
    in.sizes.assign(t.sizes, t.sizes + t.dims);
    in.strides.assign(t.strides, t.strides + t.dims);
    in.storage_offset = t.storage_offset;
    in.numel = 1;
    for (int64_t size : in.sizes) in.numel *= size;
    in.itemsize = ScalarTypeSize(t.dtype);
    in.tensor_id = TensorId(event.op.hdr.pid, t.impl);
    in.storage_data = t.storage_data;
    in.version = t.version;
    in.mutated = arg.mutated;
    inputs.args.push_back(std::move(in));
  }
  return inputs;
}

void ShapesModel::OnShapes(const tp_op_shapes_event& event) {
  if (!model_) return;
  std::optional<OpInputs> inputs = Build(event, model_->stats());
  if (!inputs) return;
  if (!model_->SetInputs(event.op.hdr.pid, event.op.hdr.tid, event.op.hdr.ts_ns,
                         std::make_shared<const OpInputs>(std::move(*inputs))))
    ++model_->stats().shapes_unattached;
}

}  // namespace torchprobe
