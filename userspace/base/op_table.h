// The operators a trace can name: one entry per probed at::_ops::<op>::call,
// indexed by the op id that travels to BPF as the probe cookie; and, past
// them, the names of the annotations seen (ids the model gives out).
#ifndef TORCHPROBE_BASE_OP_TABLE_H
#define TORCHPROBE_BASE_OP_TABLE_H

#include <cstdint>
#include <string>
#include <vector>

namespace torchprobe {

struct OpInfo {
  std::string name;      // PyTorch's name, e.g. "aten::sum"
  std::string overload;  // e.g. "dim_IntList"; "" for the default overload
  std::string schema;    // full schema; "" when it could not be resolved
  // What kind of slice: "" for an operator (category "aten" in a trace),
  // kUserAnnotation for a record_function range, named by `name` alone,
  // kAutogradNode for an autograd engine or node range (not an op either).
  std::string category = {};
};

inline constexpr const char* kUserAnnotation = "user_annotation";  // torch.profiler's name
inline constexpr const char* kAutogradNode = "autograd";

using OpTable = std::vector<OpInfo>;  // index == op id

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_OP_TABLE_H
