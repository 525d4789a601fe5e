// The numbers of torch.profiler's key_averages(): a trace's op slices grouped
// by op name, with their calls, self time and total time (annotations, which
// have a category, are left out).
#ifndef TORCHPROBE_REPORT_OP_SUMMARY_H
#define TORCHPROBE_REPORT_OP_SUMMARY_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct OpSummary {
  std::string name;  // e.g. "aten::mul" (all overloads together, as torch does)
  std::string input_shapes;  // grouped by input shape: the calls' "Input Dims" ("" none read)
  uint64_t calls = 0;
  uint64_t self_ns = 0;   // durations minus direct children's durations
  uint64_t total_ns = 0;  // durations (recursive calls counted each time)
};

// Each of `thread`'s slices' duration less its direct children's (never
// below 0): its self time, as key_averages() counts it.
std::vector<uint64_t> SelfTimes(const DecodedThread& thread);

// The ops of `threads` (threads of `trace`), sorted by self time
// (descending), then by name; ops they never call are left out.
// `by_input_shape`: one row per (name, Input Dims), as
// key_averages(group_by_input_shape=True).
std::vector<OpSummary> Summarize(const DecodedTrace& trace,
                                 const std::vector<const DecodedThread*>& threads, bool by_input_shape = false);

// The same over all of the trace's threads.
std::vector<OpSummary> Summarize(const DecodedTrace& trace, bool by_input_shape = false);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_OP_SUMMARY_H
