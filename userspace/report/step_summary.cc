// Per-step times from the decoded slices; see the header.
#include "userspace/report/step_summary.h"

#include <algorithm>

#include "userspace/model/step_slicer.h"
#include "userspace/report/text_format.h"

namespace torchprobe {
uint64_t MedianNs(std::vector<uint64_t> values) {
  if (values.empty()) return 0;
  size_t half = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<long>(half), values.end());
  uint64_t upper = values[half];
  if (values.size() % 2) return upper;
  uint64_t lower = *std::max_element(values.begin(), values.begin() + static_cast<long>(half));
  return lower + (upper - lower) / 2;
}

uint64_t OutermostOpNs(const DecodedTrace& trace, const DecodedThread& thread, size_t first, size_t last,
                       size_t top_depth) {
  uint64_t ns = 0;
  std::vector<bool> in_op;  // per level below top_depth: inside an op
  for (size_t j = first; j < last; ++j) {
    const DecodedSlice& c = thread.slices[j];
    size_t level = c.depth - top_depth;
    in_op.resize(level + 1);
    bool is_op = trace.ops[c.op].category.empty();
    bool outer = level == 0 || !in_op[level - 1];
    in_op[level] = is_op || (level > 0 && in_op[level - 1]);
    if (is_op && outer && c.end_ns > c.begin_ns) ns += c.end_ns - c.begin_ns;
  }
  return ns;
}

std::vector<StepSummary> SummarizeSteps(const DecodedTrace& trace) {
  std::vector<StepSummary> steps;
  for (const DecodedThread& t : trace.threads) {
    for (size_t i = 0; i < t.slices.size(); ++i) {
      const DecodedSlice& step = t.slices[i];
      const OpInfo& info = trace.ops[step.op];
      if (info.category.empty() || !info.name.starts_with(kStepPrefix)) continue;
      // Its slices follow it in pre-order while they are deeper.
      size_t end = i + 1;
      while (end < t.slices.size() && t.slices[end].depth > step.depth) ++end;
      steps.push_back({info.name, t.pid, t.tid, step.end_ns - step.begin_ns,
                       OutermostOpNs(trace, t, i + 1, end, step.depth + 1)});
    }
  }
  return steps;
}

void PrintSteps(const std::vector<StepSummary>& steps, size_t slowest, std::ostream& out) {
  if (steps.empty()) return;
  std::vector<uint64_t> wall, ops;
  uint64_t wall_sum = 0, op_sum = 0;
  for (const StepSummary& s : steps) {
    wall.push_back(s.wall_ns);
    ops.push_back(s.op_ns);
    wall_sum += s.wall_ns;
    op_sum += s.op_ns;
  }
  out << "\nTraining steps (ProfilerStep#): " << steps.size() << ", wall mean "
      << FormatTime(wall_sum / steps.size()) << " median " << FormatTime(MedianNs(wall))
      << "; in ops mean " << FormatTime(op_sum / steps.size()) << " median " << FormatTime(MedianNs(ops))
      << " (" << FormatShare(op_sum, wall_sum) << " of wall)\n";
  std::vector<const StepSummary*> order;
  for (const StepSummary& s : steps) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(),
                   [](const StepSummary* a, const StepSummary* b) { return a->wall_ns > b->wall_ns; });
  size_t shown = std::min(slowest, order.size());
  out << "  slowest " << shown << ":\n  " << PadRight("Step", 24) << PadLeft("Wall", 12)
      << PadLeft("In ops", 12) << PadLeft("Ops %", 10) << "  Thread\n";
  for (size_t i = 0; i < shown; ++i) {
    const StepSummary& s = *order[i];
    out << "  " << PadRight(s.name, 24) << PadLeft(FormatTime(s.wall_ns), 12)
        << PadLeft(FormatTime(s.op_ns), 12) << PadLeft(FormatShare(s.op_ns, s.wall_ns), 10) << "  "
        << s.pid << "/" << s.tid << "\n";
  }
}

}  // namespace torchprobe
