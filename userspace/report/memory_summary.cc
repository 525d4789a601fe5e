// Peak, holders and leak candidates from the alloc/free instants; see the
// header.
#include "userspace/report/memory_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "userspace/report/category_summary.h"
#include "userspace/report/text_format.h"

namespace torchprobe {
namespace {

struct Live {
  uint64_t bytes = 0;
  uint64_t ts_ns = 0;
  const std::string* op = nullptr;
  const std::string* python = nullptr;  // the line it was made from ("" unknown)
};

// Replays one process' events; `until` is how many to apply.
std::unordered_map<uint64_t, Live> Replay(const std::vector<const DecodedMemoryEvent*>& events,
                                          size_t until) {
  std::unordered_map<uint64_t, Live> live;  // by allocation id
  for (size_t i = 0; i < until; ++i) {
    const DecodedMemoryEvent& e = *events[i];
    if (e.alloc) live[e.id] = Live{e.bytes, e.ts_ns, &e.op, &e.python};
    else if (!e.preexisting) live.erase(e.id);
  }
  return live;
}

std::vector<OpMemory> ByOp(const std::unordered_map<uint64_t, Live>& live) {
  std::map<std::string, OpMemory> by_op;
  std::map<std::string, std::map<std::string, uint64_t>> lines;  // op -> its allocations' lines -> bytes
  for (const auto& [id, a] : live) {
    OpMemory& m = by_op[*a.op];
    m.op = *a.op;
    m.bytes += a.bytes;
    ++m.count;
    if (!a.python->empty()) lines[*a.op][*a.python] += a.bytes;
  }
  std::vector<OpMemory> out;
  for (auto& [op, m] : by_op) {
    const auto& by_line = lines[op];
    auto most = std::max_element(by_line.begin(), by_line.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    if (most != by_line.end()) {
      m.python = most->first;
      m.python_lines = by_line.size();
    }
    out.push_back(m);
  }
  std::sort(out.begin(), out.end(), [](const OpMemory& a, const OpMemory& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.op < b.op;
  });
  return out;
}

ProcessMemory Summarize(uint32_t pid, const std::string& device,
                        const std::vector<const DecodedMemoryEvent*>& events) {
  ProcessMemory p;
  p.pid = pid;
  p.device = device;
  size_t peak_index = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const DecodedMemoryEvent& e = *events[i];
    if (e.alloc) ++p.allocations;
    else ++p.frees;
    if (e.preexisting) {
      ++p.preexisting_frees;
      p.preexisting_bytes += e.bytes;
    }
    p.peak_reserved = std::max(p.peak_reserved, e.reserved);
    if (e.allocated > p.peak_bytes) {
      p.peak_bytes = e.allocated;
      p.peak_ns = e.ts_ns;
      peak_index = i + 1;
    }
  }
  p.at_peak = ByOp(Replay(events, peak_index));
  std::unordered_map<uint64_t, Live> alive = Replay(events, events.size());
  p.alive_count = alive.size();
  for (const auto& [id, a] : alive) p.alive_bytes += a.bytes;
  // A leak is made all through the trace: its survivors were allocated in
  // (nearly) every span of it, where one step's temporaries are all recent.
  uint64_t first = events.empty() ? 0 : events.front()->ts_ns;
  uint64_t span = events.empty() ? 0 : events.back()->ts_ns - first;
  std::map<std::string, uint32_t> spans;  // op -> bit per span
  for (const auto& [id, a] : alive) {
    uint64_t k = span ? (a.ts_ns - first) * kLeakSpans / (span + 1) : 0;
    spans[*a.op] |= 1u << k;
  }
  for (OpMemory& m : ByOp(alive)) {
    m.spread = __builtin_popcount(spans[m.op]);
    if (m.spread >= kLeakSpans - 1 && m.count >= static_cast<uint64_t>(kLeakSpans)) p.leaks.push_back(m);
  }
  return p;
}

std::string OpName(const std::string& op) { return op.empty() ? "(outside any op)" : op; }

}  // namespace

std::vector<ProcessMemory> SummarizeMemory(const DecodedTrace& trace) {
  std::map<std::pair<uint32_t, std::string>, std::vector<const DecodedMemoryEvent*>> by_pid;
  for (const DecodedMemoryEvent& e : trace.memory) by_pid[{e.pid, e.device}].push_back(&e);
  std::vector<ProcessMemory> out;
  for (auto& [key, events] : by_pid) {
    std::stable_sort(events.begin(), events.end(), [](const DecodedMemoryEvent* a, const DecodedMemoryEvent* b) {
      return a->ts_ns < b->ts_ns;
    });
    out.push_back(Summarize(key.first, key.second, events));
  }
  return out;
}

void PrintMemory(const DecodedTrace& trace, std::ostream& out) {
  out << "\nMemory (CPU: libc10's allocator; devices: their caching allocators)\n";
  if (trace.has_stats && !trace.stats.memory_traced) {
    out << "  not traced (record with --memory)\n";
    return;
  }
  std::vector<ProcessMemory> processes = SummarizeMemory(trace);
  if (processes.empty()) {
    out << "  no allocation or free seen\n";
    return;
  }
  uint64_t origin = UINT64_MAX;
  for (const DecodedThread& t : trace.threads)
    if (!t.slices.empty()) origin = std::min(origin, t.slices.front().begin_ns);
  for (const DecodedMemoryEvent& e : trace.memory) origin = std::min(origin, e.ts_ns);
  constexpr size_t kTop = 5;
  for (const ProcessMemory& p : processes) {
    if (p.device.empty()) {
      out << "  pid " << p.pid << " CPU: " << p.allocations << " allocations, " << p.frees << " frees ("
          << p.preexisting_frees << " of memory allocated before the trace, " << FormatBytes(p.preexisting_bytes)
          << " by glibc's chunk sizes)\n";
      out << "    peak " << FormatBytes(p.peak_bytes) << " allocated while tracing, at +"
          << FormatTime(p.peak_ns - origin) << "; held then by:\n";
    } else {
      out << "  pid " << p.pid << " " << p.device << ": " << p.allocations << " block allocations, " << p.frees
          << " frees (" << p.preexisting_frees << " of blocks allocated before the trace)\n";
      out << "    peak " << FormatBytes(p.peak_bytes) << " allocated (the allocator's total), at +"
          << FormatTime(p.peak_ns - origin) << "; peak reserved " << FormatBytes(p.peak_reserved)
          << "; allocated while tracing and held then by:\n";
    }
    for (size_t i = 0; i < p.at_peak.size() && i < kTop; ++i)
      out << "      " << PadRight(OpName(p.at_peak[i].op), 32) << PadLeft(FormatBytes(p.at_peak[i].bytes), 12)
          << "  " << p.at_peak[i].count << " allocations\n";
    if (p.at_peak.size() > kTop) out << "      ... and " << p.at_peak.size() - kTop << " more ops\n";
    PrintMemoryCategories(trace, p.pid, p.device, p.peak_ns, out);
    out << "    alive at the end: " << p.alive_count << " allocations, " << FormatBytes(p.alive_bytes) << "\n";
    for (const OpMemory& m : p.leaks)
      out << "      " << PadRight(OpName(m.op), 32) << PadLeft(FormatBytes(m.bytes), 12) << "  " << m.count
          << " allocations  LEAK CANDIDATE (still alive, made in " << m.spread << " of " << kLeakSpans
          << " quarters of the trace)\n"
          << (m.python.empty() ? "" : "        made at " + m.python +
                                          (m.python_lines > 1 ? " (the most bytes of " + std::to_string(m.python_lines) +
                                                                    " lines)" : "") + "\n");
  }
  if (trace.has_stats) {
    const TraceStats& s = trace.stats;
    out << "  memory events dropped: " << s.memory_dropped << " (ring buffer full); frees not seen: "
        << s.lost_frees << "; pre-existing frees not sized: " << s.preexisting_unsized << "\n";
  }
}

}  // namespace torchprobe
