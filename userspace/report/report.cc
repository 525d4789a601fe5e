#include "userspace/report/report.h"
#include "userspace/base/counted.h"

#include <cstdio>
#include <vector>

#include "bpf/events.h"
#include "userspace/model/annotation_model.h"
#include "userspace/model/shapes_model.h"
#include "userspace/report/compile_summary.h"
#include "userspace/report/cuda_summary.h"
#include "userspace/report/gpu_summary.h"
#include "userspace/report/json_trace_reader.h"
#include "userspace/report/memory_summary.h"
#include "userspace/report/op_table_printer.h"
#include "userspace/report/probe_cost_section.h"
#include "userspace/report/python_lines.h"
#include "userspace/report/thread_states.h"
#include "userspace/report/step_summary.h"
#include "userspace/report/text_format.h"
#include "userspace/report/trace_overview.h"

namespace torchprobe {
namespace {

constexpr size_t kSlowestSteps = 5;  // rows of the steps' table
constexpr size_t kTopWaits = 10;     // blocking points under the thread states

// First, so that no number below is read as the whole run's.
void PrintTruncationWarning(const DecodedTrace& trace, std::ostream& out) {
  out << "warning: trace truncated at byte " << trace.truncated_at << " of " << trace.file_size
      << " (the writer did not finish): showing the " << trace.packets << " complete packet"
      << (trace.packets == 1 ? "" : "s") << " before it\n";
}

void PrintPerProcessTables(const DecodedTrace& trace, const std::vector<TracedProcess>& processes,
                           size_t top, bool by_input_shape, std::ostream& out) {
  ProcessColumns columns = AlignProcessLines(processes);
  for (const TracedProcess& p : processes) {
    out << "\n" << ProcessLine(p, columns) << "\n";
    if (p.slices == 0) {
      out << "  no op slices\n";
      continue;
    }
    PrintOpTable(Summarize(trace, p.threads, by_input_shape), top, out);
  }
}

void PrintNotSeen(const DecodedTrace& trace, std::ostream& out) {
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
                           " (ops that began after the trace stopped: left out)");
    if (s.foreign_returns)
      line("foreign returns", std::to_string(s.foreign_returns) +
                                  " (returns at code an op tail-calls that closed none of its calls: "
                                  "other callers', ignored)");
    if (s.outside_steps)
      line("outside steps", std::to_string(s.outside_steps) +
                                " slices outside the --steps windows (left out)");
    line("unresolved symbols", std::to_string(s.unresolved_symbols) + " of " +
                                   std::to_string(s.probed_symbols) +
                                   " probed (no schema string found)");
    line("no return probe", std::to_string(s.without_returns) +
                                " op functions without a `ret` to probe (closed by the next op)");
    if (s.boxed_ops_unlisted || s.boxed_unread || s.boxed_duplicates)
      line("boxed calls", std::to_string(s.boxed_ops_unlisted) + " ops named without a schema (no at::_ops "
                              "function names them), " + std::to_string(s.boxed_unread) +
                              " whose operator could not be read, " + std::to_string(s.boxed_duplicates) +
                              " inner ::call of the same op folded into its boxed entry");
    if (s.children_held)
      line("children held", Counted(s.children_held, "forked child", "forked children") +
                                " held stopped at their fork until attached (traced from their first op), " +
                                FormatTime(s.children_held_ns / s.children_held) + " each on average");
    if (s.children_untraced)
      line("children late", Counted(s.children_untraced, "forked child", "forked children") +
                                " traced only once attached, " +
                                FormatTime(s.children_untraced_ns / s.children_untraced) +
                                " after their fork on average: what they ran before is missing "
                                "(each one's name says how long; holding them needs Linux 6.13+, "
                                "and not --no-hold-children)");
    if (s.annotations_unprobed)
      line("annotations", Counted(s.annotations_unprobed, "process", "processes") +
                              " whose libtorch has no record_function probe points we know: "
                              "their ranges are not shown");
    if (s.annotation_names_unread || s.annotation_names_cut || s.CountOf(kNamesBeforeTraceCount))
      line("annotation names", std::to_string(s.annotation_names_unread) + " of " +
                                   std::to_string(s.annotations) + " unreadable, " +
                                   std::to_string(s.annotation_names_cut) + " cut to " +
                                   std::to_string(TP_ANNOT_NAME_MAX) + " bytes, " +
                                   std::to_string(s.CountOf(kNamesBeforeTraceCount)) +
                                   " named before the trace began (ranges open as it began)");
    if (s.CountOf(kMarksSkippedCount))
      line("light tier", std::to_string(s.CountOf(kMarksSkippedCount)) +
                             " names passed that are not the step marker, not kept (the flight recorder's "
                             "light tier shows step boundaries, collectives and waits only: other "
                             "record_function ranges are not probed)");
    if (s.shapes_traced) line("tensor shapes", ShapesStatsText(s));
    if (s.autograd_nodes_unnamed || s.autograd_python_nodes)
      line("autograd nodes", std::to_string(s.autograd_nodes_unnamed) +
                                 " engine calls whose node could not be named, " +
                                 std::to_string(s.autograd_python_nodes) +
                                 " Python Function nodes shown as torch::autograd::PyNode "
                                 "(the profiler names them by their Python class)");
    if (s.catch_probes == 0 && s.probed_symbols > 0)
      line("catch probe", "none (libstdc++'s __cxa_begin_catch not found): unwound ops are "
                          "closed by the next op");
    // record writes the trace before it removes the probes: their removal
    // time is in its summary line, not here (older traces carry it).
    line("attach", (s.attach_mode.empty() ? std::string("unknown mode") : s.attach_mode) +
                       ": attach " + FormatTime(s.attach_ns) + ", detach " +
                       (s.detach_ns ? FormatTime(s.detach_ns)
                                    : std::string("after the trace was written (see record's summary)")));
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

}  // namespace

void PrintReport(const DecodedTrace& trace, std::ostream& out, const ReportOptions& options) {
  if (trace.truncated) PrintTruncationWarning(trace, out);
  std::vector<TracedProcess> processes = GroupByProcess(trace);
  PrintOverview(processes, out);
  out << "\n";
  PrintOpTable(Summarize(trace, options.by_input_shape), options.top, out);
  if (options.per_process) PrintPerProcessTables(trace, processes, options.top, options.by_input_shape, out);
  if (options.by_line) {
    out << "\n";
    PrintByLine(trace, options.top, out);
  }
  PrintProbeCost(trace, out);
  PrintMemory(trace, out);
  PrintSteps(SummarizeSteps(trace), kSlowestSteps, out);
  PrintCompile(SummarizeCompile(trace), out);
  PrintCudaCalls(SummarizeCudaCalls(trace), options.top, out);
  PrintGpu(SummarizeGpu(trace), trace.stats, options.top, out);
  PrintThreadStates(SummarizeThreadStates(trace), kTopWaits, out);
  PrintNotSeen(trace, out);
}

bool Report(const std::string& path, const ReportOptions& options, std::ostream& out,
            std::string* error) {
  DecodedTrace trace;
  bool read = LooksLikeJson(path) ? ReadJsonTrace(path, &trace, error) : ReadTrace(path, &trace, error);
  if (!read) return false;
  if (options.folded) WriteFolded(trace, out);
  else PrintReport(trace, out, options);
  return true;
}

}  // namespace torchprobe
