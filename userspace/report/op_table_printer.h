// Prints op summaries as torch.profiler's key_averages().table() does: one
// row per op name, the top N by self time, then what the rows leave out and
// the self time total. The report prints every table through it: the one over
// all processes and, with --per-process, one per process.
#ifndef TORCHPROBE_REPORT_OP_TABLE_PRINTER_H
#define TORCHPROBE_REPORT_OP_TABLE_PRINTER_H

#include <cstddef>
#include <ostream>
#include <vector>

#include "userspace/report/op_summary.h"

namespace torchprobe {

// `rows`: all ops, as Summarize returns them. Shares are of all rows' self
// time, shown or not, as torch's are.
void PrintOpTable(const std::vector<OpSummary>& rows, size_t top, std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_OP_TABLE_PRINTER_H
