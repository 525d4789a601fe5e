// `torchprobe merge OUT.pftrace IN...`: the windows of several ranks or hosts
// in one Perfetto trace, a process track per traced process (per rank), so
// that a distributed job's straggler shows at a glance.
//
// Inputs are read back with report's reader (trace_reader.h) and written
// again with the Perfetto writer: ops renumbered into one table, a pid that
// two hosts share given a fresh one, processes named "rank R <host> pid P"
// when the file name (the agent's: HOST-pidP[-rankR]-...) or the process
// name ("[rank R]") says so. Times are put on one CLOCK_MONOTONIC axis by
// each trace's wall clock (the REALTIME in its clock snapshot): hosts'
// monotonic clocks differ by their boot times, their wall clocks only by
// their NTP offsets (within which same-time windows line up). A trace
// without one (older) keeps its times as recorded, and the summary says so.
// Memory tracks are not merged (agent windows have none).
#ifndef TORCHPROBE_AGENT_TRACE_MERGE_H
#define TORCHPROBE_AGENT_TRACE_MERGE_H

#include <string>
#include <vector>

namespace torchprobe {

// Returns false with a one-line *error (an unreadable input names its file);
// nothing is written then.
bool MergeTraces(const std::string& output, const std::vector<std::string>& inputs, std::string* summary,
                 std::string* error);

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_TRACE_MERGE_H
