// The --shapes component of the model: an op entry's Tensor metadata
// (tp_op_shapes_event, bpf/shapes.bpf.c) becomes the OpInputs of the slice
// that entry opened, one entry per schema argument. Every Tensor argument
// not read is counted in the stats by why (no place, past the first
// TP_SHAPES_TENSORS, unreadable, too many dims). Tensors get small ids by
// their TensorImpl's address, as the execution trace observer numbers them.
#ifndef TORCHPROBE_MODEL_SHAPES_MODEL_H
#define TORCHPROBE_MODEL_SHAPES_MODEL_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bpf/events.h"
#include "userspace/base/op_table.h"
#include "userspace/discover/tensor_args.h"
#include "userspace/model/op_inputs.h"
#include "userspace/model/op_stack_model.h"

namespace torchprobe {

class ShapesModel {
 public:
  // The arguments of an op's schema; nullopt when not known (no inputs then).
  using SchemaArgsFn = std::function<std::optional<std::vector<SchemaArg>>(const OpInfo& op)>;
  // `ops` names op ids and must outlive the model (it may grow).
  ShapesModel(const OpTable* ops, SchemaArgsFn schema_args);

  // The model whose slices get the inputs (a capture window's fresh one).
  void SetModel(OpStackModel* model) { model_ = model; }
  // After `model_` has opened the entry's slice.
  void OnShapes(const tp_op_shapes_event& event);
  // The inputs of one entry (tests).
  std::optional<OpInputs> Build(const tp_op_shapes_event& event, TraceStats& stats);
  // Where `pid`'s libc10 keeps c10::UndefinedTensorImpl's singleton: a
  // Tensor whose TensorImpl is it is undefined (an optional weight passed as
  // at::Tensor()), written as the profiler writes one: no dims, no type.
  void SetUndefinedImpl(uint32_t pid, uint64_t address) { undefined_[pid] = address; }
  void Forget(uint32_t pid) { undefined_.erase(pid); }

 private:
  const std::vector<SchemaArg>* ArgsOf(uint32_t op_id);
  uint64_t TensorId(uint32_t pid, uint64_t impl);

  const OpTable* ops_;
  SchemaArgsFn schema_args_;
  OpStackModel* model_ = nullptr;
  std::vector<std::optional<std::vector<SchemaArg>>> args_;  // by op id, once
  std::vector<bool> args_known_;                              // ... computed yet
  std::unordered_map<uint64_t, uint64_t> tensor_ids_;  // (pid, impl) hash -> id
  std::unordered_map<uint32_t, uint64_t> undefined_;   // pid -> UndefinedTensorImpl's address
  uint64_t next_tensor_id_ = 1;
};

// What --shapes read and why the rest was not, in one line (record's
// summary, report).
std::string ShapesStatsText(const TraceStats& stats);

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_SHAPES_MODEL_H
