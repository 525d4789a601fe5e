// What a trace made with --python-stacks says about the program's lines:
// `report --by-line`, op time by the innermost Python line it was called
// from, and `report --folded`, folded stacks (Python frames, ranges and ops,
// outermost first, with each op's self time in ns) that flamegraph.pl and
// speedscope read. Both count each op's self time once, so their totals are
// the ops' time; ops called from no Python frame count under
// "(no Python frame)" / their ops alone.
#ifndef TORCHPROBE_REPORT_PYTHON_LINES_H
#define TORCHPROBE_REPORT_PYTHON_LINES_H

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct LineTime {
  std::string line;  // "FILE:LINE QUALNAME", or "(no Python frame)"
  uint64_t self_ns = 0;
  uint64_t ops = 0;  // op calls
};

// Every line ops were called from, most op time first.
std::vector<LineTime> TimeByLine(const DecodedTrace& trace);
// The table `report --by-line` prints (the first `top` lines, then the total).
void PrintByLine(const DecodedTrace& trace, size_t top, std::ostream& out);
// `report --folded`: one "frame;frame;op;op NS" line per distinct stack.
void WriteFolded(const DecodedTrace& trace, std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_PYTHON_LINES_H
