// The GPU section of the report; see the header.
#include "userspace/report/gpu_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "userspace/report/text_format.h"

namespace torchprobe {

namespace {

std::vector<GpuTimeRow> MostTimeFirst(std::map<std::string, GpuTimeRow>& rows) {
  std::vector<GpuTimeRow> sorted;
  for (auto& [name, row] : rows) sorted.push_back(std::move(row));
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const GpuTimeRow& a, const GpuTimeRow& b) { return a.total_ns > b.total_ns; });
  return sorted;
}

}  // namespace

GpuSummary SummarizeGpu(const DecodedTrace& trace) {
  GpuSummary summary;
  std::map<std::string, GpuTimeRow> by_op, kernels;
  std::map<uint64_t, StreamRow> streams;  // by track
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> spans;  // track -> (first start, last end)
  for (const DecodedGpuActivity& g : trace.gpu) {
    uint64_t ns = g.end_ns - g.begin_ns;
    ++summary.activities;
    GpuTimeRow& op = by_op[g.op];
    op.name = g.op;
    ++op.count;
    op.total_ns += ns;
    if (g.category == "kernel") {
      GpuTimeRow& k = kernels[g.name];
      k.name = g.name;
      ++k.count;
      k.total_ns += ns;
    }
    StreamRow& s = streams[g.track];
    s.device = g.device;
    s.stream = g.stream;
    ++s.activities;
    s.busy_ns += ns;
    auto [span, added] = spans.try_emplace(g.track, g.begin_ns, g.end_ns);
    span->second.first = std::min(span->second.first, g.begin_ns);
    span->second.second = std::max(span->second.second, g.end_ns);
  }
  summary.by_op = MostTimeFirst(by_op);
  summary.top_kernels = MostTimeFirst(kernels);
  for (auto& [track, row] : streams) {
    row.span_ns = spans[track].second - spans[track].first;
    summary.streams.push_back(row);
  }
  std::stable_sort(summary.streams.begin(), summary.streams.end(), [](const StreamRow& a, const StreamRow& b) {
    return std::make_pair(a.device, a.stream) < std::make_pair(b.device, b.stream);
  });
  return summary;
}

void PrintGpu(const GpuSummary& summary, const TraceStats& stats, size_t top, std::ostream& out) {
  char line[512];
  if (stats.gpu_injected || stats.gpu_not_injected) {
    std::snprintf(line, sizeof(line),
                  "\n--inject-cupti: collector loaded into %llu running processes, not into %llu (CPU side "
                  "only); %llu activities of calls made before the probes saw the process left out\n",
                  static_cast<unsigned long long>(stats.gpu_injected),
                  static_cast<unsigned long long>(stats.gpu_not_injected),
                  static_cast<unsigned long long>(stats.gpu_before_start));
    out << line;
  }
  if (stats.gpu_refused_datagrams) {  // whatever the run's own collectors sent
    std::snprintf(line, sizeof(line),
                  "\nCUPTI socket: %llu datagrams from processes the run does not trace refused (not in the "
                  "trace)\n",
                  static_cast<unsigned long long>(stats.gpu_refused_datagrams));
    out << line;
  }
  if (summary.activities == 0) return;
  out << "\nGPU time by op (kernels, copies and fills each op launched; CUPTI)\n";
  std::snprintf(line, sizeof(line), "  %-48s %10s %12s\n", "op", "# launched", "GPU total");
  out << line;
  for (size_t i = 0; i < summary.by_op.size() && i < top; ++i) {
    const GpuTimeRow& r = summary.by_op[i];
    std::snprintf(line, sizeof(line), "  %-48s %10llu %12s\n",
                  r.name.empty() ? "(no launch found)" : OneLine(r.name, 48).c_str(),
                  static_cast<unsigned long long>(r.count), FormatTime(r.total_ns).c_str());
    out << line;
  }
  out << "\nGPU streams (busy: the sum of its activities; idle: the rest of first start to last end)\n";
  std::snprintf(line, sizeof(line), "  %-8s %-8s %10s %12s %12s %8s\n", "device", "stream", "activities", "busy",
                "idle", "busy %");
  out << line;
  for (const StreamRow& s : summary.streams) {
    std::snprintf(line, sizeof(line), "  %-8u %-8u %10llu %12s %12s %8s\n", s.device, s.stream,
                  static_cast<unsigned long long>(s.activities), FormatTime(s.busy_ns).c_str(),
                  FormatTime(s.span_ns - std::min(s.span_ns, s.busy_ns)).c_str(),
                  FormatShare(s.busy_ns, s.span_ns).c_str());
    out << line;
  }
  if (!summary.top_kernels.empty()) {
    out << "\nTop kernels (GPU time)\n";
    std::snprintf(line, sizeof(line), "  %-64s %8s %12s %12s\n", "kernel", "# runs", "GPU total", "avg");
    out << line;
    for (size_t i = 0; i < summary.top_kernels.size() && i < top; ++i) {
      const GpuTimeRow& k = summary.top_kernels[i];
      std::snprintf(line, sizeof(line), "  %-64s %8llu %12s %12s\n", OneLine(k.name, 64).c_str(),
                    static_cast<unsigned long long>(k.count), FormatTime(k.total_ns).c_str(),
                    FormatTime(k.total_ns / k.count).c_str());
      out << line;
    }
  }
  std::snprintf(line, sizeof(line),
                "  collector: %llu processes, %llu activities (%llu joined to no launch, %llu clamped on "
                "their stream, %llu of calls after the end left out), %llu records dropped (socket), %llu by "
                "CUPTI, %llu unreadable, %llu past torchprobe's bounds\n",
                static_cast<unsigned long long>(stats.gpu_processes),
                static_cast<unsigned long long>(stats.gpu_activities),
                static_cast<unsigned long long>(stats.gpu_unjoined),
                static_cast<unsigned long long>(stats.gpu_clamped),
                static_cast<unsigned long long>(stats.gpu_after_stop),
                static_cast<unsigned long long>(stats.gpu_records_dropped),
                static_cast<unsigned long long>(stats.gpu_cupti_dropped),
                static_cast<unsigned long long>(stats.gpu_unreadable),
                static_cast<unsigned long long>(stats.gpu_queue_full));
  out << line;
}

}  // namespace torchprobe
