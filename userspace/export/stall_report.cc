// The stall report's text and JSON; see the header.
#include "userspace/export/stall_report.h"

#include <cstdio>

#include "userspace/base/utc_time.h"
#include "userspace/export/json_text.h"

namespace torchprobe {
namespace {

std::string Seconds(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f s", ns / 1e9);
  return text;
}


std::string Before(uint64_t dump_ns, uint64_t ns) { return Seconds(dump_ns > ns ? dump_ns - ns : 0) + " before the dump"; }

std::string SliceLine(const StallSlice& slice) {
  std::string line = slice.name;
  std::string args;
  for (const auto& [name, value] : slice.args) args += (args.empty() ? "" : ", ") + name + " " + value;
  if (slice.collective_seq) args += (args.empty() ? "" : ", ") + std::string("collective #") +
                                    std::to_string(slice.collective_seq) + " on its group since attach";
  if (!slice.category.empty()) line += " [" + slice.category + "]";
  return args.empty() ? line : line + " (" + args + ")";
}

}  // namespace

std::string StallReportText(const StallReport& r) {
  std::string text = "torchprobe flight recorder dump (" + r.reason + ") on " + r.host + " at " +
                     UtcTime(r.dump_unix_ns) + "\n";
  if (!r.detail.empty()) text += "  " + r.detail + "\n";
  text += "  trace: " + r.trace + " (from " + Before(r.dump_ns, r.from_ns) + ": " + std::to_string(r.ring_records) +
          " events, " + std::to_string(r.ring_bytes) + " bytes kept; " + std::to_string(r.dropped_for_room) +
          " older events dropped for room)\n";
  if (r.last_step_ns)
    text += "  last step boundary " + Before(r.dump_ns, r.last_step_ns) + " (" + std::to_string(r.steps_seen) +
            " since attach, median step " + Seconds(r.median_step_ns) + ")\n";
  else
    text += "  no step boundary seen since attach\n";
  for (const StallProcess& process : r.processes) {
    text += "pid " + std::to_string(process.pid) + " " + process.name + (process.ended.empty() ? "" : ", " + process.ended) +
            ":\n";
    for (const StallThread& thread : process.threads) {
      text += "  thread " + std::to_string(thread.tid) + (thread.name.empty() ? "" : " " + thread.name) + ": ";
      std::string now;
      for (const auto& [what, note] : thread.now) now += "    now " + what + ": " + note + "\n";
      if (thread.open.empty()) {
        text += "in no op" + (thread.last_closed_end_ns ? ", its last ended " + Before(r.dump_ns, thread.last_closed_end_ns)
                                                        : std::string(" in the dump")) + "\n" + now;
        continue;
      }
      text += std::to_string(thread.open.size()) + " open\n" + now;
      for (size_t depth = 0; depth < thread.open.size(); ++depth) {
        const StallSlice& slice = thread.open[depth];
        char open[32];
        std::snprintf(open, sizeof open, "%10.3f s  ", r.dump_ns > slice.begin_ns ? (r.dump_ns - slice.begin_ns) / 1e9 : 0);
        text += "    open " + std::string(open) + std::string(2 * depth, ' ') + SliceLine(slice) + "\n";
      }
    }
    for (const StallCollectives& group : process.groups)
      text += "  group " + group.group + ": rank " + std::to_string(group.rank) + " of " +
              std::to_string(group.group_size) + ", " + std::to_string(group.entered) +
              " collectives entered since attach, the last " + group.last_op + " " +
              Before(r.dump_ns, group.last_begin_ns) + "\n";
  }
  return text;
}

std::string StallReportJson(const StallReport& r) {
  JsonText json;
  json.Raw("{").Key("host").String(r.host).Raw(", ").Key("reason").String(r.reason).Raw(", ");
  json.Key("detail").String(r.detail).Raw(", ").Key("trace").String(r.trace).Raw(", ");
  json.Key("dump_ns").UInt(r.dump_ns).Raw(", ").Key("dump_unix_ns").UInt(r.dump_unix_ns).Raw(", ");
  json.Key("from_ns").UInt(r.from_ns).Raw(", ").Key("steps_seen").UInt(r.steps_seen).Raw(", ");
  json.Key("last_step_ns").UInt(r.last_step_ns).Raw(", ").Key("median_step_ns").UInt(r.median_step_ns).Raw(", ");
  json.Key("ring_records").UInt(r.ring_records).Raw(", ").Key("ring_bytes").UInt(r.ring_bytes).Raw(", ");
  json.Key("dropped_for_room").UInt(r.dropped_for_room).Raw(",\n ").Key("processes").Raw("[");
  for (size_t p = 0; p < r.processes.size(); ++p) {
    const StallProcess& process = r.processes[p];
    json.Raw(p ? ",\n  {" : "\n  {").Key("pid").UInt(process.pid).Raw(", ").Key("rank").Int(process.rank).Raw(", ");
    json.Key("name").String(process.name).Raw(", ").Key("ended").String(process.ended).Raw(", ");
    json.Key("threads").Raw("[");
    for (size_t t = 0; t < process.threads.size(); ++t) {
      const StallThread& thread = process.threads[t];
      json.Raw(t ? ",\n   {" : "\n   {").Key("tid").UInt(thread.tid).Raw(", ").Key("name").String(thread.name).Raw(", ");
      json.Key("last_closed_end_ns").UInt(thread.last_closed_end_ns).Raw(", ").Key("now").Raw("{");
      for (size_t n = 0; n < thread.now.size(); ++n)
        json.Raw(n ? ", " : "").Key(thread.now[n].first).String(thread.now[n].second);
      json.Raw("}, ").Key("open").Raw("[");
      for (size_t s = 0; s < thread.open.size(); ++s) {
        const StallSlice& slice = thread.open[s];
        json.Raw(s ? ", {" : "{").Key("name").String(slice.name).Raw(", ").Key("category").String(slice.category);
        json.Raw(", ").Key("begin_ns").UInt(slice.begin_ns).Raw(", ").Key("collective_seq").UInt(slice.collective_seq);
        json.Raw(", ").Key("args").Raw("{");
        for (size_t a = 0; a < slice.args.size(); ++a)
          json.Raw(a ? ", " : "").Key(slice.args[a].first).String(slice.args[a].second);
        json.Raw("}}");
      }
      json.Raw("]}");
    }
    json.Raw("], ").Key("groups").Raw("[");
    for (size_t g = 0; g < process.groups.size(); ++g) {
      const StallCollectives& group = process.groups[g];
      json.Raw(g ? ", {" : "{").Key("group").String(group.group).Raw(", ").Key("rank").Int(group.rank).Raw(", ");
      json.Key("group_size").Int(group.group_size).Raw(", ").Key("entered").UInt(group.entered).Raw(", ");
      json.Key("last_begin_ns").UInt(group.last_begin_ns).Raw(", ").Key("last_op").String(group.last_op).Raw("}");
    }
    json.Raw("]}");
  }
  json.Raw("\n]}\n");
  return json.str();
}

}  // namespace torchprobe
