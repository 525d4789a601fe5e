// The CUDA component of the model: the arguments of each CUDA/NCCL call
// (bpf/cuda.bpf.c), and of each c10d collective (bpf/collectives.bpf.c)
// (model/collective_args), until the writer writes the call's slice, which
// the op stack model opened from the same entry. Launched kernels are named by a
// callback (the host stub's symbol, discover/address_symbols).
#ifndef TORCHPROBE_MODEL_CUDA_MODEL_H
#define TORCHPROBE_MODEL_CUDA_MODEL_H

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "bpf/events.h"
#include "userspace/base/op_table.h"
#include "userspace/model/slice_args.h"

namespace torchprobe {

class CudaModel : public SliceArgsSource {
 public:
  // The function symbol at `address` in `pid`, demangled; "" if none.
  using KernelNamer = std::function<std::string(uint32_t pid, uint64_t address)>;
  // `ops` names op ids and must outlive the model (it may grow).
  CudaModel(const OpTable* ops, KernelNamer kernel_name);

  void OnCall(const tp_cuda_call_event& event);
  // A c10d collective's entry: its group and tensors (model/collective_args).
  void OnCollective(const tp_collective_event& event);
  bool TakeArgs(uint32_t pid, uint32_t tid, uint64_t begin_ns, SliceArgs* out) override;
  // One more argument for the slice of the call that entered at `begin_ns`
  // (the GPU join's correlation).
  void AddArg(uint32_t pid, uint32_t tid, uint64_t begin_ns, SliceArg arg) {
    args_[{pid, tid, begin_ns}].push_back(std::move(arg));
  }
  size_t pending() const { return args_.size(); }  // calls whose slice is not written yet

 private:
  const OpTable* ops_;
  KernelNamer kernel_name_;
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, SliceArgs> args_;  // (pid, tid, begin)
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_CUDA_MODEL_H
