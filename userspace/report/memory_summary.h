// What `report` says about memory (--memory traces), per process: the peak
// of the allocated-bytes counter and when, the ops whose allocations held
// the most at that moment, and leak candidates: ops whose allocations are
// still alive at the end and were made all through the trace (a steady
// growth, step over step, not the last step's temporaries).
#ifndef TORCHPROBE_REPORT_MEMORY_SUMMARY_H
#define TORCHPROBE_REPORT_MEMORY_SUMMARY_H

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct OpMemory {
  std::string op;  // allocating op ("" outside ops)
  uint64_t bytes = 0;
  uint64_t count = 0;
  int spread = 0;  // leak candidates: of kLeakSpans equal spans of the trace, how many
                   // saw one of these allocations made
  std::string python;       // --python-stacks: the line that made the most of these bytes ("" unknown)
  size_t python_lines = 0;  // how many lines made them
};

struct ProcessMemory {
  uint32_t pid = 0;
  std::string device;              // "" CPU, else "cuda:0", ...: the allocator's own totals
  uint64_t peak_reserved = 0;      // a device's
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t preexisting_frees = 0;
  uint64_t preexisting_bytes = 0;  // of those, sized from glibc's chunk headers
  uint64_t peak_bytes = 0;
  uint64_t peak_ns = 0;            // CLOCK_MONOTONIC
  std::vector<OpMemory> at_peak;   // alive at the peak, by allocating op, most bytes first
  uint64_t alive_count = 0;        // alive at the end
  uint64_t alive_bytes = 0;
  std::vector<OpMemory> leaks;     // leak candidates, most bytes first
};

inline constexpr int kLeakSpans = 4;

// Processes with memory events, by pid, then device (CPU first).
std::vector<ProcessMemory> SummarizeMemory(const DecodedTrace& trace);

// The "Memory" section; says so when the trace has no memory tracks.
void PrintMemory(const DecodedTrace& trace, std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_MEMORY_SUMMARY_H
