// `torchprobe report TRACE`: who was traced and when, the table
// torch.profiler's key_averages().table() prints (ops grouped by name, sorted
// by self time), optionally one such table per process, the training steps'
// times, then what the trace could not show (drops, repairs, unresolved
// symbols, unreadable annotation names, a cut-off file).
#ifndef TORCHPROBE_REPORT_REPORT_H
#define TORCHPROBE_REPORT_REPORT_H

#include <cstddef>
#include <ostream>
#include <string>

#include "userspace/report/op_summary.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct ReportOptions {
  size_t top = 30;           // rows of each op table
  bool per_process = false;  // one table per traced process, after the one over all
  bool by_line = false;      // --by-line: op time by Python line, after the op table
  bool folded = false;       // --folded: folded stacks only (python_lines.h), for flame graphs
  bool by_input_shape = false;  // --group-by-input-shape: a row per (op, Input Dims), as
                                // key_averages(group_by_input_shape=True)
};

// Prints a warning first if the trace is truncated, the processes, threads
// and span, the op table(s) and the "What was not seen" section.
void PrintReport(const DecodedTrace& trace, std::ostream& out, const ReportOptions& options = {});

// Reads `path` and prints its report; false with a one-line *error when the
// file cannot be read as a trace (the caller exits 1).
bool Report(const std::string& path, const ReportOptions& options, std::ostream& out,
            std::string* error);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_REPORT_H
