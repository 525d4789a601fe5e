// What a CUDA runtime, driver or NCCL call was asked to do, decoded from the
// raw arguments its entry probe read (bpf/cuda.bpf.c): the x86-64 SysV
// places of each argument of each probed call's signature.
#ifndef TORCHPROBE_MODEL_CUDA_CALL_INFO_H
#define TORCHPROBE_MODEL_CUDA_CALL_INFO_H

#include <cstdint>
#include <string_view>

#include "bpf/events.h"
#include "userspace/model/slice_args.h"

namespace torchprobe {

struct CudaCallInfo {
  bool known = false;        // a call whose signature we decode
  uint64_t function = 0;     // launches: host stub (runtime) or CUfunction (driver)
  bool host_stub = false;    // `function` is a host address with a symbol
  uint32_t grid[3] = {};     // launches through cudaLaunchKernel / cuLaunchKernel
  uint32_t block[3] = {};
  bool has_dims = false;
  uint64_t shared_mem = 0;
  uint64_t stream = 0;       // cudaStream_t / CUstream; 0: the default stream
  bool has_stream = false;
  uint64_t bytes = 0;        // copies, fills, NCCL (count * element size)
  bool has_bytes = false;
  int64_t copy_kind = -1;    // cudaMemcpyKind
  uint64_t count = 0;        // NCCL: elements
  int64_t datatype = -1;     // NCCL: ncclDataType_t
  int64_t peer = -1;         // NCCL: send/recv peer, reduce/broadcast root
  uint64_t comm = 0;         // NCCL: communicator
  uint64_t event = 0;        // cudaEventSynchronize / cudaStreamWaitEvent
};

// Decodes `event`, an entry of the call named `call` (e.g.
// "cudaLaunchKernel_ptsz").
CudaCallInfo DecodeCudaCall(std::string_view call, const tp_cuda_call_event& event);

// The call's arguments as slice args; `kernel` ("" if unknown) is the
// launched kernel's name.
SliceArgs CudaCallArgs(const CudaCallInfo& info, const std::string& kernel);

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_CUDA_CALL_INFO_H
