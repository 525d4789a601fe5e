// Arguments a slice carries besides its op (a CUDA call's stream, sizes,
// kernel; a collective's group and sizes): set on the slice by the probe set
// that read them (OpStackModel::SetArgs), written as they are. Writers know
// nothing of what made them.
#ifndef TORCHPROBE_MODEL_SLICE_ARGS_H
#define TORCHPROBE_MODEL_SLICE_ARGS_H

#include <cstdint>
#include <string>
#include <vector>

namespace torchprobe {

struct SliceArg {
  std::string name;
  bool is_text = false;
  std::string text;     // when is_text
  uint64_t number = 0;  // otherwise
};
using SliceArgs = std::vector<SliceArg>;

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_SLICE_ARGS_H
