#include "userspace/agent/window_digest.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "userspace/report/memory_summary.h"
#include "userspace/report/step_summary.h"

namespace torchprobe {

WindowDigest DigestWindow(const DecodedTrace& trace) {
  WindowDigest digest;
  std::vector<uint64_t> walls;
  for (const StepSummary& step : SummarizeSteps(trace)) {
    walls.push_back(step.wall_ns);
    digest.step_max_ns = std::max(digest.step_max_ns, step.wall_ns);
  }
  digest.steps = walls.size();
  digest.step_p50_ns = MedianNs(walls);
  for (const DecodedThread& thread : trace.threads)
    digest.op_ns += OutermostOpNs(trace, thread, 0, thread.slices.size(), 0);
  // Busy time per device: the union of its activities' intervals.
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> per_device;
  for (const DecodedGpuActivity& activity : trace.gpu)
    if (activity.end_ns > activity.begin_ns) per_device[activity.device].emplace_back(activity.begin_ns, activity.end_ns);
  digest.gpu = !trace.gpu.empty();
  for (auto& [device, spans] : per_device) {
    std::sort(spans.begin(), spans.end());
    uint64_t end = 0;
    for (const auto& [begin, finish] : spans) {
      uint64_t from = std::max(begin, end);
      if (finish > from) digest.gpu_busy_ns += finish - from;
      end = std::max(end, finish);
    }
  }
  digest.memory = trace.stats.memory_traced != 0;
  if (digest.memory)
    for (const ProcessMemory& process : SummarizeMemory(trace))
      for (const OpMemory& leak : process.leaks)
        digest.leaks.push_back(WindowLeak{process.device.empty() ? leak.op : leak.op + " (" + process.device + ")",
                                          leak.python, leak.bytes, leak.count});
  std::stable_sort(digest.leaks.begin(), digest.leaks.end(),
                   [](const WindowLeak& a, const WindowLeak& b) { return a.bytes > b.bytes; });
  return digest;
}

}  // namespace torchprobe
