// What the GPU join (gpu_join) hands to a writer: one activity per kernel,
// copy or fill that ran on a GPU, joined to the CPU call that launched it
// and the op that made that call. A writer that takes them implements
// GpuSink beside TraceSink; they come after every slice tree, before Finish.
#ifndef TORCHPROBE_MODEL_GPU_SINK_H
#define TORCHPROBE_MODEL_GPU_SINK_H

#include <cstdint>
#include <string>

namespace torchprobe {

struct GpuActivity {
  enum Kind : uint8_t { kKernel, kMemcpy, kMemset };
  Kind kind = kKernel;
  uint32_t pid = 0;        // the process that launched it
  uint64_t start_ns = 0;   // CLOCK_MONOTONIC, clamped to its stream's previous end
  uint64_t end_ns = 0;     // >= start_ns
  uint32_t device = 0;
  uint32_t context = 0;
  uint32_t stream = 0;     // CUPTI's stream id
  uint32_t graph_id = 0;   // the CUDA graph it ran in; 0: none
  uint32_t cupti_correlation = 0;
  std::string name;        // kernel name, or Kineto's "Memcpy HtoD (Pageable -> Device)" / "Memset (Device)"
  int32_t grid[3] = {};
  int32_t block[3] = {};
  uint32_t shared_bytes = 0;
  uint32_t registers = 0;
  uint64_t bytes = 0;      // copies and fills
  bool clamped = false;    // began before its stream's previous activity ended (clock jitter)
  // The join (0/"" when no CPU call was found for it):
  uint64_t correlation = 0;   // the launching CPU slice's "correlation" arg
  bool first_of_launch = false;  // the first activity of that launch (a graph launch has several)
  uint32_t launch_tid = 0;
  std::string launch_call;    // "cudaLaunchKernel", "cudaGraphLaunch", ...
  std::string op;             // the innermost op open on that thread at the call ("" outside ops)
};

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
