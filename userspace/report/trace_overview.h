// Who and when a trace shows: its processes, each with its threads, and the
// time its op slices span. Printed before the op table; a process's line also
// heads its own table under --per-process.
#ifndef TORCHPROBE_REPORT_TRACE_OVERVIEW_H
#define TORCHPROBE_REPORT_TRACE_OVERVIEW_H

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct TracedProcess {
  uint32_t pid = 0;
  const DecodedProcess* process = nullptr;    // null: the file has no descriptor for it
  std::vector<const DecodedThread*> threads;  // in file order
  uint64_t slices = 0;                        // op slices of all its threads
};

// The trace's processes by pid, each with its threads; a pid that only
// threads name (its process descriptor is not in the file) is one too.
// Pointers are into `trace`.
std::vector<TracedProcess> GroupByProcess(const DecodedTrace& trace);

// Column widths that line up the process lines of `processes`.
struct ProcessColumns {
  size_t pid = 0;
  size_t name = 0;
  size_t threads = 0;  // digits
  size_t threads_noun = 0;
  size_t slices = 0;  // digits
  size_t slices_noun = 0;
};
ProcessColumns AlignProcessLines(const std::vector<TracedProcess>& processes);

// "pid 4242  python3  2 threads  1808 op slices  /usr/bin/python3 train.py",
// the command line cut to a width that keeps it one readable line.
std::string ProcessLine(const TracedProcess& process, const ProcessColumns& columns = {});

// "Traced: N processes, ...", a line per process with a line of its threads
// (the busiest first, at most 8), then the span from the first slice's begin
// to the last slice's end and its duration.
void PrintOverview(const std::vector<TracedProcess>& processes, std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_TRACE_OVERVIEW_H
