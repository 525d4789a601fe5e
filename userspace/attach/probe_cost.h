// What torchprobe's own probes cost per op, measured without touching any
// target: a child of torchprobe calls a tiny op-shaped function
// (calibration_op.h) in rounds, unprobed, then probed through each returns
// route exactly as ops are (the same BPF programs, ProbeLinks and link
// kinds, in a BPF object of its own so that nothing reaches the trace). The
// best round of each, less the unprobed one, is the cost of one op's entry
// and return probes.
//
// A lower bound: the function is hot in cache and its probes fire back to
// back; a real op's probes also evict the target's caches and branch
// predictors (a loop of small ops slowed by ~19 us per op where ~10 us were
// calibrated for `ret` probes). Takes 30-100 ms, mostly loading BPF and
// creating links; run it beside the attach. Two torchprobes calibrating at
// the same moment disturb each other a little: the kernel gives a uretprobe
// to every process that hits a probed function's breakpoint, whatever pid
// the uretprobe's link was for.
#ifndef TORCHPROBE_ATTACH_PROBE_COST_H
#define TORCHPROBE_ATTACH_PROBE_COST_H

#include <cstdint>
#include <vector>
#include <string>

#include "userspace/base/status.h"
#include "userspace/base/trace_stats.h"

namespace torchprobe {

struct ProbeCostRoutes {
  bool uretprobe = false;  // entry uprobe + uretprobe (needs uprobe_multi)
  bool ret = false;        // entry uprobe + a uprobe on each `ret`
  bool use_uprobe_multi = true;
  // Where base/calibration_function is probed in /proc/self/exe: its
  // entry and its `ret`s (discover/calibration_op.h plans it).
  uint64_t entry_offset = 0;
  std::vector<uint64_t> return_offsets;
};

struct ProbeCost {
  uint64_t uretprobe_ns = 0;  // per op, entry + uretprobe; 0: not measured
  uint64_t ret_ns = 0;        // per op, entry + `ret` probes; 0: not measured
  uint64_t took_ns = 0;       // wall time of the whole calibration
};

// Measures the routes asked for; an error (one line) when the calibration
// function is not found or a probe does not attach. Safe to call from a
// thread of its own, beside the attach.
StatusOr<ProbeCost> MeasureProbeCost(const ProbeCostRoutes& routes);

// Puts `cost` in the stats' probe_ns_* fields; probe_ns_per_op is the cost of
// the route each traced process used (uretprobe_processes, ret_fallbacks).
void PutProbeCost(const ProbeCost& cost, TraceStats* stats);

// "; probe cost 1.0 us per op, 0.4% of the time inside ops" for record's
// summary line ("" when not calibrated). Only ops that returned count: an
// op an exception unwound never hit its return probe.
std::string ProbeCostSummary(const TraceStats& stats);

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_PROBE_COST_H
