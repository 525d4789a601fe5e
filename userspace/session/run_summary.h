// The lines a record run ends with on stderr: what was written, what was
// traced, what each probe set has to say, what was held or missed, and the
// probes left behind. Printed from what the run hands it; unit-testable.
#ifndef TORCHPROBE_SESSION_RUN_SUMMARY_H
#define TORCHPROBE_SESSION_RUN_SUMMARY_H

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "userspace/base/trace_stats.h"

namespace torchprobe {

struct RunSummary {
  std::string outputs;                // what was written ("3 windows of t.pftrace and ...")
  uint64_t events = 0;                // op events of every window
  std::vector<std::string> traced;    // "PID NAME" of each traced process
  std::vector<std::string> set_lines; // the probe sets' own lines
  bool children_unfollowed = false;   // attached by pid with --no-children
  std::string why_untraced_children;  // why a child was not held at its fork
  uint64_t probes_left = 0;           // probes never hit, left to the keeper
  int keeper_pid = 0;
};

// Every line of the summary, each ending in '\n', "torchprobe: " first.
std::string FormatRunSummary(const RunSummary& run, const TraceStats& stats);

// "850 ms", "1.2 s", "3.5 min".
std::string FormatDuration(uint64_t ns);

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_RUN_SUMMARY_H
