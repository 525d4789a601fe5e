#include "userspace/report/report.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

namespace torchprobe {
namespace {

constexpr size_t kMaxNameWidth = 55;  // torch's max_name_column_width
constexpr size_t kColumnWidth = 12;
constexpr const char* kSpacing = "  ";

// torch.autograd.profiler_util._format_time, from nanoseconds.
std::string FormatTime(uint64_t ns) {
  double us = static_cast<double>(ns) / 1e3;
  char buf[64];
  if (us >= 1e6) {
    snprintf(buf, sizeof(buf), "%.3fs", us / 1e6);
  } else if (us >= 1e3) {
    snprintf(buf, sizeof(buf), "%.3fms", us / 1e3);
  } else {
    snprintf(buf, sizeof(buf), "%.3fus", us);
  }
  return buf;
}

std::string FormatShare(uint64_t part, uint64_t total) {
  if (total == 0) return "NaN";
  char buf[64];
  snprintf(buf, sizeof(buf), "%.2f%%", static_cast<double>(part) * 100.0 / static_cast<double>(total));
  return buf;
}

std::string Pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

// First, so that no number below is read as the whole run's.
void PrintTruncationWarning(const DecodedTrace& trace, std::ostream& out) {
  out << "warning: trace truncated at byte " << trace.truncated_at << " of " << trace.file_size
      << " (the writer did not finish): showing the " << trace.packets << " complete packet"
      << (trace.packets == 1 ? "" : "s") << " before it\n";
}

}  // namespace

std::vector<OpSummary> Summarize(const DecodedTrace& trace) {
  std::unordered_map<std::string, size_t> index;
  std::vector<OpSummary> rows;
  // Name of each op id, grouped by name as key_averages() groups by key.
  std::vector<size_t> row_of_op(trace.ops.size());
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    auto [it, inserted] = index.emplace(trace.ops[i].name, rows.size());
    if (inserted) rows.push_back(OpSummary{trace.ops[i].name});
    row_of_op[i] = it->second;
  }
  std::vector<uint64_t> self;
  for (const DecodedThread& thread : trace.threads) {
    const auto& slices = thread.slices;
    self.assign(slices.size(), 0);
    for (size_t i = 0; i < slices.size(); ++i) {
      self[i] = slices[i].end_ns - slices[i].begin_ns;
    }
    for (size_t i = 0; i < slices.size(); ++i) {
      int32_t p = slices[i].parent;
      if (p >= 0) {
        uint64_t d = slices[i].end_ns - slices[i].begin_ns;
        self[p] = self[p] > d ? self[p] - d : 0;
      }
    }
    for (size_t i = 0; i < slices.size(); ++i) {
      OpSummary& row = rows[row_of_op[slices[i].op]];
      ++row.calls;
      row.self_ns += self[i];
      row.total_ns += slices[i].end_ns - slices[i].begin_ns;
    }
  }
  rows.erase(std::remove_if(rows.begin(), rows.end(), [](const OpSummary& r) { return r.calls == 0; }),
             rows.end());
  std::sort(rows.begin(), rows.end(), [](const OpSummary& a, const OpSummary& b) {
    if (a.self_ns != b.self_ns) return a.self_ns > b.self_ns;
    return a.name < b.name;
  });
  return rows;
}

void PrintReport(const DecodedTrace& trace, std::ostream& out, const ReportOptions& options) {
  if (trace.truncated) PrintTruncationWarning(trace, out);
  size_t top_n = options.top;
  std::vector<OpSummary> rows = Summarize(trace);
  uint64_t self_total = 0;
  for (const OpSummary& r : rows) self_total += r.self_ns;
  if (rows.size() > top_n) rows.resize(top_n);

  size_t name_width = 4;
  for (const OpSummary& r : rows) name_width = std::max(name_width, r.name.size() + 4);
  name_width = std::min(name_width, kMaxNameWidth);
  const char* headers[] = {"Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
                           "# of Calls"};

  std::string rule = std::string(name_width, '-') + kSpacing;
  for (size_t i = 0; i < 6; ++i) rule += std::string(kColumnWidth, '-') + kSpacing;
  out << rule << "\n";
  out << Pad("Name", name_width) << kSpacing;
  for (const char* h : headers) out << Pad(h, kColumnWidth) << kSpacing;
  out << "\n" << rule << "\n";
  for (const OpSummary& r : rows) {
    std::string name = r.name;
    if (name.size() >= kMaxNameWidth - 3) name = name.substr(0, kMaxNameWidth - 3) + "...";
    out << Pad(name, name_width) << kSpacing << Pad(FormatShare(r.self_ns, self_total), kColumnWidth)
        << kSpacing << Pad(FormatTime(r.self_ns), kColumnWidth) << kSpacing
        << Pad(FormatShare(r.total_ns, self_total), kColumnWidth) << kSpacing
        << Pad(FormatTime(r.total_ns), kColumnWidth) << kSpacing
        << Pad(FormatTime(r.calls ? r.total_ns / r.calls : 0), kColumnWidth) << kSpacing
        << Pad(std::to_string(r.calls), kColumnWidth) << kSpacing << "\n";
  }
  out << rule << "\n";
  out << "Self CPU time total: " << FormatTime(self_total) << "\n";

  out << "\nWhat was not seen\n";
  auto line = [&out](const char* what, const std::string& value) {
    char label[32];
    snprintf(label, sizeof(label), "  %-20s", what);
    out << label << value << "\n";
  };
  if (trace.truncated && !trace.has_stats) {
    // The writer puts the stats record last, so a cut file never has it.
    line("stats", "missing: the file is cut at byte " + std::to_string(trace.truncated_at) +
                      ", before the torchprobe stats record (its last packet); drops, repairs "
                      "and attach times are unknown");
  } else if (!trace.has_stats) {
    // A cut between two packets cannot be told from a trace that ends there.
    line("stats", "no torchprobe stats record in this trace (not written by torchprobe, "
                  "or cut short between two packets)");
  } else {
    const TraceStats& s = trace.stats;
    line("dropped events", std::to_string(s.dropped_events) + " of " +
                               std::to_string(s.events + s.dropped_events) +
                               " op events (ring buffer full)");
    line("unknown events", std::to_string(s.unknown_events) + " (records the decoder skipped)");
    line("repaired begins", std::to_string(s.begin_repaired) +
                                " (entry before the trace started, or lost)");
    line("repaired ends", std::to_string(s.end_repaired) +
                              " (return after the trace stopped, or lost)");
    line("lost returns", std::to_string(s.mismatched_exits) +
                             " (ops closed when a later call or return on their frame or above showed they had returned)");
    line("unwound", std::to_string(s.unwound) +
                        " (ops a caught C++ exception unwound, closed at the catch)");
    line("before start", std::to_string(s.before_start) +
                             " (ops that ended while the probes were being attached: left out)");
    line("after stop", std::to_string(s.after_stop) +
                           " (ops that began while the probes were being removed: left out)");
    line("unresolved symbols", std::to_string(s.unresolved_symbols) + " of " +
                                   std::to_string(s.probed_symbols) +
                                   " probed (no schema string found)");
    line("no return probe", std::to_string(s.without_returns) +
                                " op functions without a `ret` to probe (closed by the next op)");
    if (s.catch_probes == 0)
      line("catch probe", "none (libstdc++'s __cxa_begin_catch not found): unwound ops are "
                          "closed by the next op");
    line("attach", (s.attach_mode.empty() ? std::string("unknown mode") : s.attach_mode) +
                       ": attach " + FormatTime(s.attach_ns) + ", detach " +
                       FormatTime(s.detach_ns));
  }
  if (trace.unterminated) {
    line("unterminated slices",
         std::to_string(trace.unterminated) +
             (trace.truncated ? " (open at the cut: timed up to their thread's last event)"
                              : " (no end in the file)"));
  }
  if (trace.unmatched_ends) {
    line("unmatched ends", std::to_string(trace.unmatched_ends) + " (end with no open slice)");
  }
  if (trace.dropped_packets) {
    line("dropped packets", std::to_string(trace.dropped_packets) + " (flagged by the writer)");
  }
}

bool Report(const std::string& path, const ReportOptions& options, std::ostream& out,
            std::string* error) {
  DecodedTrace trace;
  if (!ReadTrace(path, &trace, error)) return false;
  PrintReport(trace, out, options);
  return true;
}

}  // namespace torchprobe
