// What the GPU join (gpu_join) hands to a writer: one activity per kernel,
// copy or fill that ran on a GPU, joined to the CPU call that launched it
// and the op that made that call. A writer that takes them implements
// GpuSink beside TraceSink; they come after every slice tree, before Finish.
#ifndef TORCHPROBE_MODEL_GPU_SINK_H
#define TORCHPROBE_MODEL_GPU_SINK_H

#include "userspace/base/gpu_records.h"

namespace torchprobe {

// Kineto's category of an activity, which the writers give its slice.
inline const char* KinetoCategory(GpuActivity::Kind kind) {
  switch (kind) {
    case GpuActivity::kKernel: return "kernel";
    case GpuActivity::kMemcpy: return "gpu_memcpy";
    case GpuActivity::kMemset: return "gpu_memset";
  }
  return "gpu";
}

// The name of the CPU launch slice's argument that holds its correlation:
// the GPU activities of that launch carry the same number.
inline constexpr const char* kCorrelationArg = "correlation";

class GpuSink {
 public:
  virtual ~GpuSink() = default;
  virtual void AddGpuActivity(const GpuActivity& activity) = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_GPU_SINK_H
