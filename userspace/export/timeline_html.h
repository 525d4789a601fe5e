// The --memory-timeline .html page: memory over time as a stacked plot, one
// band per allocating op (the heaviest at their peak; the rest as "other
// ops"), and a band for memory allocated before the trace whose free was
// seen, as an inline SVG in a self-contained page: no script, no network,
// opens in any browser.
#ifndef TORCHPROBE_EXPORT_TIMELINE_HTML_H
#define TORCHPROBE_EXPORT_TIMELINE_HTML_H

#include <string>
#include <vector>

#include "userspace/export/memory_timeline.h"

namespace torchprobe {

// `rows` sorted as MemoryTimeline::SortedRows(); `op_names` by op id.
std::string TimelineHtml(const std::vector<TimelineRow>& rows, const std::vector<std::string>& op_names);

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_TIMELINE_HTML_H
