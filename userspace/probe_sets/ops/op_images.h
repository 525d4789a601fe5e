// The images whose functions the ops set probes as ops, each with its probe
// plan: libtorch first (ATen ops, c10d collectives, autograd nodes: a
// process is traced once it maps it), then the libraries traced alongside it
// when mapped (their calls are ops too: one op id space, one return route).
#ifndef TORCHPROBE_PROBE_SETS_OPS_OP_IMAGES_H
#define TORCHPROBE_PROBE_SETS_OPS_OP_IMAGES_H

#include <string>

#include "userspace/base/status.h"
#include "userspace/discover/collective_probes.h"
#include "userspace/discover/cuda_probes.h"
#include "userspace/discover/op_probes.h"
#include "userspace/discover/py_node.h"

namespace torchprobe {

inline constexpr const char* kTorchLibrary = "libtorch_cpu.so";

struct ProbeImage {
  const char* library;  // basename prefix in /proc/PID/maps
  StatusOr<OpProbeSet> (*find)(const std::string& path);
  const char* entry = "op_enter";  // the program at function entry (BpfPrograms::Program)
};
inline constexpr ProbeImage kProbeImages[] = {
    {kTorchLibrary, FindOpProbes},
    {"libgloo.so", FindGlooProbes},            // collectives' communication, on Gloo's threads
    {"libtorch_python.so", FindPyNodeProbes},  // Python Functions' autograd nodes (PyNode::apply)
    // CUDA calls, with their arguments (stream, sizes, kernel).
    {"libcudart.so", FindCudaProbes, "cuda_enter"},  // runtime: launches, copies, waits
    {"libcuda.so", FindCudaProbes, "cuda_enter"},    // driver: JIT kernels' launches
    {"libnccl.so", FindCudaProbes, "cuda_enter"},    // NCCL, inside c10d's calls
};
inline constexpr const ProbeImage& kTorchImage = kProbeImages[0];

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_OPS_OP_IMAGES_H
