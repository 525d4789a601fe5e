// What the agent keeps of a window for its fleet gauges (agent_metrics.h)
// and its index line: the window's steps, op time and GPU time, read from
// the trace the window's record wrote, so the gauges say what the trace
// says (a dashboard's straggler rank is the one whose window shows it);
// with --memory, its leak candidates (leak_growth.h follows them).
#ifndef TORCHPROBE_AGENT_WINDOW_DIGEST_H
#define TORCHPROBE_AGENT_WINDOW_DIGEST_H

#include <cstdint>
#include <vector>

#include "userspace/agent/leak_growth.h"

#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct WindowDigest {
  uint64_t steps = 0;        // ProfilerStep slices
  uint64_t step_p50_ns = 0;  // their median wall time (of an even count, the middle two's mean)
  uint64_t step_max_ns = 0;  // the longest
  uint64_t op_ns = 0;        // time in ops: outermost op slices, summed over threads
  uint64_t gpu_busy_ns = 0;  // time some GPU activity ran, per device, summed over devices
  bool gpu = false;          // the window carried GPU activity (CUPTI)
  bool memory = false;       // the window traced allocations (--memory)
  std::vector<WindowLeak> leaks;  // its leak candidates, every process and device, most bytes first
};

WindowDigest DigestWindow(const DecodedTrace& trace);

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_WINDOW_DIGEST_H
