#include "userspace/report/probe_cost_section.h"

#include <cstdint>
#include <cstdio>
#include <string>

#include "userspace/base/probe_cost_kept.h"
#include "userspace/report/text_format.h"

namespace torchprobe {

void PrintProbeCost(const DecodedTrace& trace, std::ostream& out) {
  if (!trace.has_stats) return;
  const TraceStats& s = trace.stats;
  out << "\nProbe cost (torchprobe's own, estimated)\n";
  auto line = [&out](const char* what, const std::string& value) {
    char label[32];
    snprintf(label, sizeof(label), "  %-20s", what);
    out << label << value << "\n";
  };
  if (s.probe_ns_per_op == 0) {
    line("per op", "not estimated (no calibration in this trace)");
    return;
  }
  // From the slices themselves: the time threads spent inside top-level ops,
  // which holds the probe cost of every op nested in them.
  // Only slices that returned count (a lower bound): the return probe of an
  // op an exception unwound never fired.
  uint64_t slices = 0, inside_ns = 0;
  for (const DecodedThread& t : trace.threads) {
    for (const DecodedSlice& slice : t.slices) {
      if (!slice.unwound && !slice.repaired_end && slice.ended) ++slices;
      if (slice.depth == 0 && slice.end_ns > slice.begin_ns) inside_ns += slice.end_ns - slice.begin_ns;
    }
  }
  std::string calibrated;
  if (s.probe_ns_uretprobe) calibrated += "uretprobe returns " + FormatTime(s.probe_ns_uretprobe);
  if (s.probe_ns_ret) calibrated += (calibrated.empty() ? "" : ", ") + std::string("`ret` probes ") + FormatTime(s.probe_ns_ret);
  // A cost kept from an earlier run's calibration (the agent's windows:
  // probe_sets/ops/probe_cost_cache.h) says so, and how old it was.
  std::string kept;
  if (s.CountOf(kProbeCostKept))
    kept = "; measured " + std::to_string(s.CountOf(kProbeCostAgeS)) + " s before this trace by an earlier run";
  line("per op", FormatTime(s.probe_ns_per_op) + " (entry and return probes; calibrated: " + calibrated +
                     ", in " + FormatTime(s.probe_ns_calibration) + kept + ")");
  uint64_t cost_ns = slices * s.probe_ns_per_op;
  line("in this trace", std::to_string(slices) + " returned op slices x " + FormatTime(s.probe_ns_per_op) + " = " +
                            FormatTime(cost_ns) + ", " + FormatShare(cost_ns, inside_ns) + " of the " +
                            FormatTime(inside_ns) + " inside ops");
  line("a lower bound", "calibrated on a hot loop; real ops slow more (their caches and branch "
                        "predictors disturbed: ~2x in a loop of small ops)");
}

}  // namespace torchprobe
