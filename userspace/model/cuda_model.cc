// CUDA calls' and collectives' arguments; see the header.
#include "userspace/model/cuda_model.h"

#include <utility>

#include "userspace/model/collective_args.h"
#include "userspace/model/cuda_call_info.h"

namespace torchprobe {

CudaModel::CudaModel(const OpTable* ops, KernelNamer kernel_name)
    : ops_(ops), kernel_name_(std::move(kernel_name)) {}

SliceArgs CudaModel::ArgsOf(const tp_cuda_call_event& event) const {
  if (event.op.op_id >= ops_->size()) return {};
  CudaCallInfo info = DecodeCudaCall((*ops_)[event.op.op_id].name, event);
  std::string kernel;
  if (info.host_stub && info.function && kernel_name_) kernel = kernel_name_(event.op.hdr.pid, info.function);
  return CudaCallArgs(info, kernel);
}

SliceArgs CudaModel::ArgsOf(const tp_collective_event& event) const {
  if (event.op.op_id >= ops_->size()) return {};
  return CollectiveArgs((*ops_)[event.op.op_id].name, event);
}

}  // namespace torchprobe
