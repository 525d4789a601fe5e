// Arguments a slice carries besides its op (a CUDA call's stream, sizes,
// kernel), and where a writer finds them: by the thread and the begin time
// of the entry that opened the slice. Writers know nothing of what made them.
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

class SliceArgsSource {
 public:
  virtual ~SliceArgsSource() = default;
  // Moves the arguments of the slice `tid` of `pid` began at `begin_ns` to
  // *out and forgets them; false when that slice has none.
  virtual bool TakeArgs(uint32_t pid, uint32_t tid, uint64_t begin_ns, SliceArgs* out) = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_SLICE_ARGS_H
