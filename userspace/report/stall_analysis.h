// `torchprobe report A.stall.json [B.stall.json ...]`: the flight recorder's
// stall reports of one or several ranks (hosts, recorders), read together:
// per group size, which ranks entered the newest collective and are still
// in it, and which never entered it, with what their threads were doing.
// Collectives are numbered per process group from each recorder's attach,
// so ranks recorded from the same moment (one launch, or attached before the
// first collective) compare exactly; the times are said too, in each host's
// wall clock.
#ifndef TORCHPROBE_REPORT_STALL_ANALYSIS_H
#define TORCHPROBE_REPORT_STALL_ANALYSIS_H

#include <string>
#include <vector>

namespace torchprobe {

bool IsStallReport(const std::string& path);

// The analysis as text, or false with `error` (one line naming the file).
bool AnalyzeStalls(const std::vector<std::string>& paths, std::string* text, std::string* error);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_STALL_ANALYSIS_H
