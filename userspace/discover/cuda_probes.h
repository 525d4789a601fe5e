// The CUDA probe set, CPU side: the CUDA runtime (libcudart.so.*), driver
// (libcuda.so.1) and NCCL (libnccl.so.2) entry points PyTorch calls to put
// work on a GPU, found in whichever copy of each library the process mapped
// (wheels bring their own from site-packages). Each call becomes a slice on
// the calling thread, inside the op that made it, named as the API names it:
//  - kernel launches: cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel,
//    cuLaunchKernelEx, and cudaGraphLaunch;
//  - async copies and fills: cudaMemcpyAsync, cudaMemsetAsync;
//  - waits: cudaStreamSynchronize, cudaEventSynchronize,
//    cudaDeviceSynchronize, cudaStreamWaitEvent;
//  - NCCL's collectives and point-to-point calls: ncclAllReduce, ncclSend...
// with the `_ptsz` (per-thread default stream) variant of each runtime call
// that has one.
#ifndef TORCHPROBE_DISCOVER_CUDA_PROBES_H
#define TORCHPROBE_DISCOVER_CUDA_PROBES_H

#include <optional>
#include <string>
#include <string_view>

#include "userspace/discover/op_probes.h"

namespace torchprobe {

// The slice name of a CUDA/NCCL symbol we probe (the symbol itself), or
// nullopt for any other symbol.
std::optional<std::string> CudaCallName(std::string_view symbol);

// The probe plan for a CUDA runtime, driver or NCCL image: its calls above.
StatusOr<OpProbeSet> FindCudaProbes(const std::string& elf_path);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_CUDA_PROBES_H
