// What an op was called with, as far as the probes read it (--shapes): one
// entry per argument of its schema, the Tensors with their metadata. A slice
// points at its op's inputs (Slice::inputs), shared by every writer that
// writes the slice and freed with it. Writers know nothing of how it was read.
#ifndef TORCHPROBE_MODEL_OP_INPUTS_H
#define TORCHPROBE_MODEL_OP_INPUTS_H

#include <cstdint>
#include <string>
#include <vector>

namespace torchprobe {

struct OpInput {
  enum Kind : uint8_t {
    kOther,          // not a Tensor (its value is not read)
    kTensor,         // a Tensor whose metadata was read
    kTensorUnknown,  // a Tensor whose metadata could not be read (said in the stats)
  } kind = kOther;
  std::string type;  // kTensor: "float", "long int" (caffe2's names); kOther: "Scalar" for a
                     // Scalar argument, as the profiler writes it, else ""
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
  int64_t numel = 0;      // the product of the sizes
  uint32_t itemsize = 0;  // bytes per element; 0 when the dtype is not known
  uint64_t tensor_id = 0; // kTensor: the same for every use of one TensorImpl in a process
  // kTensor, with --memory: its storage's data pointer (the allocation it
  // lives in; 0 not read) and version counter; `mutated`: the schema marks
  // it written (Tensor(a!)).
  uint64_t storage_data = 0;
  uint32_t version = 0;
  bool mutated = false;
};

struct OpInputs {
  std::vector<OpInput> args;  // in schema order
  // The thread's autograd sequence number at the op's entry
  // (at::sequence_number::peek(): the profiler's `Sequence number`, the
  // ET's `seq_id`); -1 when not read.
  int64_t sequence_number = -1;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_OP_INPUTS_H
