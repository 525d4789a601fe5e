// CUDA call arguments kept by (pid, tid, entry time); see the header.
#include "userspace/model/cuda_model.h"

#include <utility>

#include "userspace/model/collective_args.h"
#include "userspace/model/cuda_call_info.h"

namespace torchprobe {

CudaModel::CudaModel(const OpTable* ops, KernelNamer kernel_name)
    : ops_(ops), kernel_name_(std::move(kernel_name)) {}

void CudaModel::OnCall(const tp_cuda_call_event& event) {
  if (event.op.op_id >= ops_->size()) return;
  SliceArgs args;
  CudaCallInfo info = DecodeCudaCall((*ops_)[event.op.op_id].name, event);
  std::string kernel;
  if (info.host_stub && info.function && kernel_name_) kernel = kernel_name_(event.op.hdr.pid, info.function);
  args = CudaCallArgs(info, kernel);
  if (!args.empty()) args_[{event.op.hdr.pid, event.op.hdr.tid, event.op.hdr.ts_ns}] = std::move(args);
}

void CudaModel::OnCollective(const tp_collective_event& event) {
  if (event.op.op_id >= ops_->size()) return;
  SliceArgs args = CollectiveArgs((*ops_)[event.op.op_id].name, event);
  if (!args.empty()) args_[{event.op.hdr.pid, event.op.hdr.tid, event.op.hdr.ts_ns}] = std::move(args);
}

bool CudaModel::TakeArgs(uint32_t pid, uint32_t tid, uint64_t begin_ns, SliceArgs* out) {
  auto it = args_.find({pid, tid, begin_ns});
  if (it == args_.end()) return false;
  *out = std::move(it->second);
  args_.erase(it);
  return true;
}

}  // namespace torchprobe
