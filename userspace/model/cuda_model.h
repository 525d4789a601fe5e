// The CUDA component of the model: the arguments of each CUDA/NCCL call
// (bpf/cuda.bpf.c), and of each c10d collective (bpf/collectives.bpf.c)
// (model/collective_args), as the slice the op stack model opens from the
// same entry carries them (Slice::args). Launched kernels are named by a
// callback (the host stub's symbol, discover/address_symbols).
#ifndef TORCHPROBE_MODEL_CUDA_MODEL_H
#define TORCHPROBE_MODEL_CUDA_MODEL_H

#include <cstdint>
#include <functional>
#include <string>

#include "bpf/events.h"
#include "userspace/base/op_table.h"
#include "userspace/model/slice_args.h"

namespace torchprobe {

class CudaModel {
 public:
  // The function symbol at `address` in `pid`, demangled; "" if none.
  using KernelNamer = std::function<std::string(uint32_t pid, uint64_t address)>;
  // `ops` names op ids and must outlive the model (it may grow).
  CudaModel(const OpTable* ops, KernelNamer kernel_name);

  // A CUDA/NCCL call's arguments (none for an op id past the table).
  SliceArgs ArgsOf(const tp_cuda_call_event& event) const;
  // A c10d collective's entry: its group and tensors (model/collective_args).
  SliceArgs ArgsOf(const tp_collective_event& event) const;

 private:
  const OpTable* ops_;
  KernelNamer kernel_name_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_CUDA_MODEL_H
