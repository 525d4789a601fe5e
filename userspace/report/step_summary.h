// Training steps in a trace (the ProfilerStep#N slices record derives from
// the step marker): each step's wall time and the time its thread spent in
// ops (outermost op slices inside it), and the report section that prints
// their spread and the slowest ones.
#ifndef TORCHPROBE_REPORT_STEP_SUMMARY_H
#define TORCHPROBE_REPORT_STEP_SUMMARY_H

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct StepSummary {
  std::string name;  // "ProfilerStep#3"
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t wall_ns = 0;  // the step slice's duration
  uint64_t op_ns = 0;    // its outermost op slices' durations, summed
};

// The median of `values`: of an even count, the mean of the middle two (of
// 2 steps, not the larger); 0 for none.
uint64_t MedianNs(std::vector<uint64_t> values);

// The time in the outermost ops among `thread`'s slices [first, last), a
// pre-order run whose shallowest depth is `top_depth`: an op counts once, at
// its outermost level (nested ops run inside it); an annotation or step is
// not an op, and an op under one is still outermost.
uint64_t OutermostOpNs(const DecodedTrace& trace, const DecodedThread& thread, size_t first, size_t last,
                       size_t top_depth);

// The steps of `trace`, in trace order (thread by thread, then in time).
std::vector<StepSummary> SummarizeSteps(const DecodedTrace& trace);

// "Training steps" with mean and median wall and op time and the `slowest`
// slowest steps; nothing when there are none.
void PrintSteps(const std::vector<StepSummary>& steps, size_t slowest, std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_STEP_SUMMARY_H
