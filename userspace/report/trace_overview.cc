#include "userspace/report/trace_overview.h"

#include <string.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "userspace/report/text_format.h"

namespace torchprobe {
namespace {

constexpr size_t kNameWidth = 32;     // wider than any comm (15), room for a cut-off name
constexpr size_t kCmdlineWidth = 72;  // keeps the line about as wide as the op table
constexpr size_t kThreadsShown = 8;   // per process; a pool of 64 workers is not 64 lines
constexpr const char* kIndent = "  ";
constexpr const char* kThread = "thread";
constexpr const char* kThreads = "threads";
constexpr const char* kSlice = "op slice";
constexpr const char* kSlices = "op slices";

const char* Noun(uint64_t n, const char* one, const char* many) { return n == 1 ? one : many; }

// "N threads", N right-aligned in `width` and the noun padded to `noun_width`,
// so the columns after it line up whether N is 1 or not.
std::string CountColumn(uint64_t n, size_t width, size_t noun_width, const char* one,
                        const char* many) {
  return PadLeft(std::to_string(n), width) + " " + PadRight(Noun(n, one, many), noun_width);
}

std::string ProcessName(const TracedProcess& p) {
  if (p.process == nullptr || p.process->name.empty()) return "?";
  return OneLine(p.process->name, kNameWidth);
}

std::string ThreadList(const TracedProcess& p) {
  std::vector<const DecodedThread*> threads = p.threads;
  std::stable_sort(threads.begin(), threads.end(),
                   [](const DecodedThread* a, const DecodedThread* b) {
                     return a->slices.size() > b->slices.size();
                   });
  std::string list;
  for (size_t i = 0; i < threads.size() && i < kThreadsShown; ++i) {
    if (i) list += ", ";
    list += std::to_string(threads[i]->tid);
    if (!threads[i]->name.empty()) list += " " + OneLine(threads[i]->name, kNameWidth);
    list += ": " + std::to_string(threads[i]->slices.size());
  }
  if (threads.size() > kThreadsShown) {
    list += ", ... and " + std::to_string(threads.size() - kThreadsShown) + " more";
  }
  return list;
}

}  // namespace

std::vector<TracedProcess> GroupByProcess(const DecodedTrace& trace) {
  std::vector<TracedProcess> processes;
  std::unordered_map<uint32_t, size_t> index;
  for (const DecodedProcess& p : trace.processes) {
    if (index.emplace(p.pid, processes.size()).second) {
      processes.emplace_back().pid = p.pid;
      processes.back().process = &p;
    }
  }
  for (const DecodedThread& t : trace.threads) {
    auto [it, inserted] = index.emplace(t.pid, processes.size());
    if (inserted) processes.emplace_back().pid = t.pid;
    TracedProcess& p = processes[it->second];
    p.threads.push_back(&t);
    p.slices += t.slices.size();
  }
  // The writer describes processes as it meets them (DataLoader workers can
  // come before their parent); pid order puts a launched command first.
  std::stable_sort(processes.begin(), processes.end(),
                   [](const TracedProcess& a, const TracedProcess& b) { return a.pid < b.pid; });
  return processes;
}

ProcessColumns AlignProcessLines(const std::vector<TracedProcess>& processes) {
  ProcessColumns c;
  for (const TracedProcess& p : processes) {
    c.pid = std::max(c.pid, std::to_string(p.pid).size());
    c.name = std::max(c.name, ProcessName(p).size());
    c.threads = std::max(c.threads, std::to_string(p.threads.size()).size());
    c.threads_noun = std::max(c.threads_noun, strlen(Noun(p.threads.size(), kThread, kThreads)));
    c.slices = std::max(c.slices, std::to_string(p.slices).size());
    c.slices_noun = std::max(c.slices_noun, strlen(Noun(p.slices, kSlice, kSlices)));
  }
  return c;
}

std::string ProcessLine(const TracedProcess& p, const ProcessColumns& columns) {
  std::string line =
      "pid " + PadRight(std::to_string(p.pid), columns.pid) + kIndent +
      PadRight(ProcessName(p), columns.name) + kIndent +
      CountColumn(p.threads.size(), columns.threads, columns.threads_noun, kThread, kThreads) +
      kIndent + CountColumn(p.slices, columns.slices, columns.slices_noun, kSlice, kSlices);
  if (p.process == nullptr) return line + kIndent + "(no process descriptor in the file)";
  if (!p.process->cmdline.empty()) line += kIndent + OneLine(p.process->cmdline, kCmdlineWidth);
  // Trailing padding only makes lines longer than they look.
  return line.erase(line.find_last_not_of(' ') + 1);
}

void PrintOverview(const std::vector<TracedProcess>& processes, std::ostream& out) {
  uint64_t threads = 0, slices = 0;
  uint64_t first = std::numeric_limits<uint64_t>::max(), last = 0;
  for (const TracedProcess& p : processes) {
    threads += p.threads.size();
    slices += p.slices;
    for (const DecodedThread* t : p.threads) {
      // Slices are in begin order; a later slice may still end first.
      if (!t->slices.empty()) first = std::min(first, t->slices.front().begin_ns);
      for (const DecodedSlice& s : t->slices) last = std::max(last, s.end_ns);
    }
  }
  out << "Traced: " << CountColumn(processes.size(), 0, 0, "process", "processes") << ", "
      << CountColumn(threads, 0, 0, kThread, kThreads) << ", "
      << CountColumn(slices, 0, 0, kSlice, kSlices) << "\n";
  ProcessColumns columns = AlignProcessLines(processes);
  for (const TracedProcess& p : processes) {
    out << kIndent << ProcessLine(p, columns) << "\n";
    if (!p.threads.empty()) out << kIndent << kIndent << "threads: " << ThreadList(p) << "\n";
  }
  if (slices == 0) {
    out << "Span: no op slices\n";
  } else {
    out << "Span: " << FormatTime(first) << " -> " << FormatTime(last)
        << " (CLOCK_MONOTONIC): " << FormatTime(last - first) << "\n";
  }
}

}  // namespace torchprobe
