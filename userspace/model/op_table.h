// The operators a trace can name: one entry per probed at::_ops::<op>::call,
// indexed by the op id that travels to BPF as the probe cookie.
#ifndef TORCHPROBE_MODEL_OP_TABLE_H
#define TORCHPROBE_MODEL_OP_TABLE_H

#include <cstdint>
#include <string>
#include <vector>

namespace torchprobe {

struct OpInfo {
  std::string name;      // PyTorch's name, e.g. "aten::sum"
  std::string overload;  // e.g. "dim_IntList"; "" for the default overload
  std::string schema;    // full schema; "" when it could not be resolved
};

using OpTable = std::vector<OpInfo>;  // index == op id

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_OP_TABLE_H
