// The report's "Probe cost" section: how much of the traced time was
// torchprobe's own probes, from the per-op cost calibrated at record time
// (userspace/attach/probe_cost.h) and the op slices the trace holds, so a
// reader can judge how much the trace inflates their ops.
#ifndef TORCHPROBE_REPORT_PROBE_COST_SECTION_H
#define TORCHPROBE_REPORT_PROBE_COST_SECTION_H

#include <ostream>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

// Nothing for a trace without stats (the "What was not seen" section says so).
void PrintProbeCost(const DecodedTrace& trace, std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_PROBE_COST_SECTION_H
