// CUDA runtime, driver and NCCL entry points by their exported names; see
// the header.
#include "userspace/discover/cuda_probes.h"

#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/named_probes.h"

namespace torchprobe {
namespace {

// Exported C names (no mangling, no symbol version in the string table).
constexpr std::string_view kCudaCalls[] = {
    // Runtime API: launches, copies, graph launches, waits.
    "cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz",
    "cudaMemcpyAsync", "cudaMemcpyAsync_ptsz", "cudaMemsetAsync", "cudaMemsetAsync_ptsz",
    "cudaGraphLaunch", "cudaGraphLaunch_ptsz", "cudaStreamSynchronize", "cudaStreamSynchronize_ptsz",
    "cudaEventSynchronize", "cudaDeviceSynchronize", "cudaStreamWaitEvent", "cudaStreamWaitEvent_ptsz",
    // Driver API: what Triton's and other JIT kernels launch through.
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
    // NCCL: collectives and point-to-point (not the pnccl* profiling aliases).
    "ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter",
    "ncclSend", "ncclRecv",
};

}  // namespace

std::optional<std::string> CudaCallName(std::string_view symbol) {
  for (std::string_view call : kCudaCalls)
    if (call == symbol) return std::string(call);
  return std::nullopt;
}

StatusOr<OpProbeSet> FindCudaProbes(const std::string& elf_path) {
  return FindNamedProbes(elf_path, [](const ElfSymbol& symbol) { return CudaCallName(symbol.name); }, "cuda");
}

}  // namespace torchprobe
