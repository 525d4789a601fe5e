// `torchprobe report TRACE`: the table torch.profiler's
// key_averages().table() prints (ops grouped by name, sorted by self time),
// then what the trace could not show (drops, repairs, unresolved symbols).
#ifndef TORCHPROBE_REPORT_REPORT_H
#define TORCHPROBE_REPORT_REPORT_H

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct OpSummary {
  std::string name;    // e.g. "aten::mul" (all overloads together, as torch does)
  uint64_t calls = 0;
  uint64_t self_ns = 0;   // durations minus direct children's durations
  uint64_t total_ns = 0;  // durations (recursive calls counted each time)
};

// All ops, sorted by self time (descending), then by name.
std::vector<OpSummary> Summarize(const DecodedTrace& trace);

struct ReportOptions {
  size_t top = 30;           // rows of the op table
  bool per_process = false;  // one table per traced process
};

// Prints the table and the "What was not seen" section.
void PrintReport(const DecodedTrace& trace, std::ostream& out, const ReportOptions& options = {});

// Reads `path` and prints its report; false with a one-line *error when the
// file cannot be read as a trace (the caller exits 1).
bool Report(const std::string& path, const ReportOptions& options, std::ostream& out,
            std::string* error);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_REPORT_H
