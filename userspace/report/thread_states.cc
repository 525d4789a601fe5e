// The report's thread states; see the header.
#include "userspace/report/thread_states.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "userspace/model/thread_state.h"
#include "userspace/report/text_format.h"

namespace torchprobe {

ThreadStatesSummary SummarizeThreadStates(const DecodedTrace& trace, uint64_t from_ns, uint64_t to_ns) {
  ThreadStatesSummary summary;
  std::map<std::pair<uint32_t, uint32_t>, ThreadStateTotals> threads;
  std::map<std::string, BlockingPoint> points;
  auto seen = [&](ThreadStateTotals& t, uint64_t begin, uint64_t end) {
    begin = std::max(begin, from_ns);
    end = std::min(end, to_ns);
    if (end <= begin) return;
    t.first_ns = t.first_ns ? std::min(t.first_ns, begin) : begin;
    t.last_ns = std::max(t.last_ns, end);
  };
  for (const DecodedThreadState& s : trace.thread_states) {
    uint64_t begin = std::max(s.begin_ns, from_ns), end = std::min(s.end_ns, to_ns);
    ThreadStateTotals& t = threads[{s.pid, s.tid}];
    t.pid = s.pid;
    t.tid = s.tid;
    if (end <= begin) continue;
    seen(t, begin, end);
    std::string where;
    switch (KindOfSpan(s.name, &where)) {
      case SpanKind::kRunnable: t.runnable_ns += end - begin; break;
      case SpanKind::kGil: t.gil_ns += end - begin; where = "GIL"; break;
      case SpanKind::kBlocked: t.blocked_ns += end - begin; break;
      case SpanKind::kOther: continue;
    }
    if (where.empty()) continue;
    BlockingPoint& point = points[where];
    point.where = where;
    ++point.count;
    point.total_ns += end - begin;
  }
  // Their ops widen the span seen: a thread may run a long op without a switch.
  for (const DecodedThread& thread : trace.threads) {
    auto it = threads.find({thread.pid, thread.tid});
    if (it == threads.end()) continue;
    it->second.name = thread.name;
    for (const DecodedSlice& slice : thread.slices) seen(it->second, slice.begin_ns, slice.end_ns);
  }
  for (auto& [key, t] : threads)
    if (t.last_ns > t.first_ns) summary.threads.push_back(std::move(t));
  for (auto& [where, point] : points) summary.points.push_back(std::move(point));
  std::stable_sort(summary.points.begin(), summary.points.end(),
                   [](const BlockingPoint& a, const BlockingPoint& b) { return a.total_ns > b.total_ns; });
  return summary;
}

void PrintThreadStates(const ThreadStatesSummary& summary, size_t top, std::ostream& out) {
  if (summary.threads.empty()) return;
  out << "\nThread states (--sched): over the span each thread was seen; on CPU is the span less its time off\n";
  char row[256];
  std::snprintf(row, sizeof row, "  %-24s %12s %12s %12s %12s %12s\n", "Thread", "Span", "On CPU", "Runnable",
                "Blocked", "GIL wait");
  out << row;
  for (const ThreadStateTotals& t : summary.threads) {
    std::string name = std::to_string(t.pid) + "/" + std::to_string(t.tid) + (t.name.empty() ? "" : " " + t.name);
    if (name.size() > 24) name.resize(24);
    std::snprintf(row, sizeof row, "  %-24s %12s %12s %12s %12s %12s\n", name.c_str(),
                  FormatTime(t.last_ns - t.first_ns).c_str(), FormatTime(t.on_cpu_ns()).c_str(),
                  FormatTime(t.runnable_ns).c_str(), FormatTime(t.blocked_ns).c_str(), FormatTime(t.gil_ns).c_str());
    out << row;
  }
  if (summary.points.empty()) return;
  out << "  where they waited (blocked in a system call, or for the GIL), most time first:\n";
  size_t shown = 0;
  for (const BlockingPoint& p : summary.points) {
    if (shown++ == top) break;
    std::snprintf(row, sizeof row, "    %-30s %8llu times %12s\n", p.where.c_str(),
                  static_cast<unsigned long long>(p.count), FormatTime(p.total_ns).c_str());
    out << row;
  }
}

}  // namespace torchprobe
