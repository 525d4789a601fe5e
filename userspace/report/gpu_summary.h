// The report's GPU section (--cupti traces): GPU time per op (the kernels,
// copies and fills it launched), each stream's busy and idle time, and the
// kernels that took the most GPU time; the datagrams the CUPTI socket
// refused. Nothing when the trace has no GPU activity and nothing was refused.
#ifndef TORCHPROBE_REPORT_GPU_SUMMARY_H
#define TORCHPROBE_REPORT_GPU_SUMMARY_H

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct GpuTimeRow {
  std::string name;  // an op ("" for activities joined to no launch), or a kernel
  uint64_t count = 0;
  uint64_t total_ns = 0;
};

struct StreamRow {
  uint32_t device = 0;
  uint32_t stream = 0;
  uint64_t activities = 0;
  uint64_t busy_ns = 0;  // sum of its activities (they do not overlap on a stream)
  uint64_t span_ns = 0;  // first start to last end
};

struct GpuSummary {
  std::vector<GpuTimeRow> by_op;        // most GPU time first
  std::vector<GpuTimeRow> top_kernels;  // kernels only, most GPU time first
  std::vector<StreamRow> streams;       // by device, then stream
  uint64_t activities = 0;
};

GpuSummary SummarizeGpu(const DecodedTrace& trace);

// "GPU time by op", "GPU streams", "Top kernels" (each at most `top` rows),
// and the collector's counts; nothing without GPU activity in the trace.
void PrintGpu(const GpuSummary& summary, const TraceStats& stats, size_t top, std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_GPU_SUMMARY_H
