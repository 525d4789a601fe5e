// What CUPTI saw, as the collector's records are parsed (cupti/
// record_receiver) and the model joins them (model/gpu_join): a kernel, copy
// or fill that ran on a GPU, and the runtime or driver call that made it.
// The receiver hands them to a GpuRecordSink, so it knows no model.
#ifndef TORCHPROBE_BASE_GPU_RECORDS_H
#define TORCHPROBE_BASE_GPU_RECORDS_H

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

// A CUDA runtime or driver API call as CUPTI recorded it.
struct GpuApiCall {
  uint32_t pid = 0;
  uint32_t tid = 0;  // 0: CUPTI's thread could not be named
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t correlation = 0;  // CUPTI's
};

class GpuRecordSink {
 public:
  virtual ~GpuRecordSink() = default;
  virtual void OnApiCall(const GpuApiCall& api) = 0;
  virtual void OnActivity(GpuActivity activity) = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_GPU_RECORDS_H
