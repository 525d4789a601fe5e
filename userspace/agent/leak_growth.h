// What the agent learns about memory across one target's windows (--memory).
// A window's leak candidate (report/memory_summary.h: allocations made all
// through the window and still alive at its end) may be a step's
// temporaries caught by the window's end; an op (or a line, with
// --python-stacks) that is a candidate window after window is keeping what
// it makes: its live bytes grow by that much every window. After
// kGrowingWindows such windows in a row it is reported as growing, in the
// index and as a metric, until a window sees it leave nothing alive.
#ifndef TORCHPROBE_AGENT_LEAK_GROWTH_H
#define TORCHPROBE_AGENT_LEAK_GROWTH_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace torchprobe {

// One leak candidate of one window.
struct WindowLeak {
  std::string op;    // the allocating op ("" outside ops); a device's: "aten::empty (cuda:0)"
  std::string line;  // the Python line that made the most of its bytes ("" unknown)
  uint64_t bytes = 0;  // still alive at the window's end
  uint64_t count = 0;  // ... in that many allocations
};

struct GrowingLeak {
  std::string op;
  std::string line;      // the latest window's
  uint64_t windows = 0;  // candidate in this many windows in a row, up to the latest
  uint64_t bytes = 0;    // left alive over those windows, summed
  uint64_t last_bytes = 0;  // ... by the latest
};

inline constexpr uint64_t kGrowingWindows = 3;

class LeakGrowth {
 public:
  // A window that traced memory: its candidates extend their runs, every
  // other op's run ends.
  void Observe(const std::vector<WindowLeak>& leaks);
  // Runs of kGrowingWindows or more, most bytes first.
  std::vector<GrowingLeak> Growing() const;

 private:
  std::map<std::string, GrowingLeak> runs_;  // by op
};

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_LEAK_GROWTH_H
