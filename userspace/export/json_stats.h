// The TraceStats as one JSON object ("torchprobe_stats" in both JSON
// formats), every field by the name it carries in the Perfetto trace.
#ifndef TORCHPROBE_EXPORT_JSON_STATS_H
#define TORCHPROBE_EXPORT_JSON_STATS_H

#include "userspace/export/json_text.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

inline void AppendStats(JsonText& text, const TraceStats& stats) {
  text.Key("torchprobe_stats").Raw("{");
  for (const StatsField& field : kStatsFields) text.Key(field.name).UInt(stats.*field.value).Raw(", ");
  for (const auto& [name, count] : stats.sections) text.Key(name).UInt(count.value).Raw(", ");
  text.Key("attach_mode").String(stats.attach_mode).Raw("}");
}

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_JSON_STATS_H
