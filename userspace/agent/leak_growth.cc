// Runs of leak candidates across windows; see the header.
#include "userspace/agent/leak_growth.h"

#include <algorithm>

namespace torchprobe {

void LeakGrowth::Observe(const std::vector<WindowLeak>& leaks) {
  std::map<std::string, GrowingLeak> runs;
  for (const WindowLeak& leak : leaks) {
    GrowingLeak& run = runs[leak.op];
    if (run.windows == 0) {  // first of this window's candidates for the op (a device's are apart)
      auto before = runs_.find(leak.op);
      if (before != runs_.end()) run = before->second;
      run.op = leak.op;
      run.windows += 1;
      run.last_bytes = 0;
    }
    run.last_bytes += leak.bytes;
    run.bytes += leak.bytes;
    if (!leak.line.empty()) run.line = leak.line;
  }
  runs_ = std::move(runs);
}

std::vector<GrowingLeak> LeakGrowth::Growing() const {
  std::vector<GrowingLeak> out;
  for (const auto& [op, run] : runs_)
    if (run.windows >= kGrowingWindows) out.push_back(run);
  std::sort(out.begin(), out.end(), [](const GrowingLeak& a, const GrowingLeak& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.op < b.op;
  });
  return out;
}

}  // namespace torchprobe
