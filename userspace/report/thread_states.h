// The report's thread states (--sched): per traced thread, the time it was
// on a CPU, runnable (waiting for one), blocked and waiting for the GIL over
// the span it was seen, and where the threads blocked most (the system call
// each slept in), from the trace's thread-state tracks.
#ifndef TORCHPROBE_REPORT_THREAD_STATES_H
#define TORCHPROBE_REPORT_THREAD_STATES_H

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct ThreadStateTotals {
  uint32_t pid = 0, tid = 0;
  std::string name;
  uint64_t first_ns = 0, last_ns = 0;  // the span seen: its first and last op or state
  uint64_t runnable_ns = 0, blocked_ns = 0, gil_ns = 0;
  uint64_t on_cpu_ns() const {
    uint64_t off = runnable_ns + blocked_ns + gil_ns, span = last_ns - first_ns;
    return span > off ? span - off : 0;
  }
};

struct BlockingPoint {
  std::string where;  // "futex", "read (D)", "GIL", "outside a system call"
  uint64_t count = 0, total_ns = 0;
};

struct ThreadStatesSummary {
  std::vector<ThreadStateTotals> threads;  // threads with states, by pid then tid
  std::vector<BlockingPoint> points;       // most time first
};

// The states of the trace's spans within [from_ns, to_ns), clipped to it
// (the span seen too).
ThreadStatesSummary SummarizeThreadStates(const DecodedTrace& trace, uint64_t from_ns = 0,
                                          uint64_t to_ns = UINT64_MAX);

// Nothing when the trace has no thread states.
void PrintThreadStates(const ThreadStatesSummary& summary, size_t top, std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_THREAD_STATES_H
