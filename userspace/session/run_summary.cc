// The record run's closing lines; see the header.
#include "userspace/session/run_summary.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include "userspace/base/counted.h"
#include "userspace/attach/probe_cost.h"

namespace torchprobe {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;
constexpr uint64_t kProbesRemovedPerSecond = 20;  // per-symbol uprobes, one grace period each

std::string Line(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Line(const char* format, ...) {
  char buffer[2048];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return std::string("torchprobe: ") + buffer + "\n";
}

// " (links released after 180.2 ms)" when the kernel let go of the links
// later than the breakpoints left the targets' code; "" otherwise.
std::string Released(const TraceStats& stats) {
  if (stats.release_ns <= stats.detach_ns + 1'000'000) return "";
  char text[64];
  std::snprintf(text, sizeof text, " (links released after %.1f ms)", stats.release_ns / 1e6);
  return text;
}

}  // namespace

std::string FormatDuration(uint64_t ns) {
  char buf[32];
  double s = static_cast<double>(ns) / 1e9;
  if (s < 1) std::snprintf(buf, sizeof(buf), "%.0f ms", s * 1e3);
  else if (s < 120) std::snprintf(buf, sizeof(buf), "%.1f s", s);
  else std::snprintf(buf, sizeof(buf), "%.1f min", s / 60);
  return buf;
}

std::string FormatRunSummary(const RunSummary& run, const TraceStats& stats) {
  std::string text = Line(
      "wrote %s: %" PRIu64 " op events, %" PRIu64 " dropped, %" PRIu64 " slices repaired (begin %" PRIu64
      ", end %" PRIu64 "), %" PRIu64 " of %" PRIu64 " op symbols unresolved; %s attach %.1f ms, detach %.1f ms%s%s",
      run.outputs.c_str(), run.events, stats.dropped_events, stats.begin_repaired + stats.end_repaired,
      stats.begin_repaired, stats.end_repaired, stats.unresolved_symbols, stats.probed_symbols,
      stats.attach_mode.c_str(), stats.attach_ns / 1e6, stats.detach_ns / 1e6, Released(stats).c_str(),
      ProbeCostSummary(stats).c_str());
  std::string traced;
  for (const std::string& process : run.traced) traced += (traced.empty() ? "" : ", ") + process;
  if (!traced.empty()) text += Line("traced %s", traced.c_str());
  for (const std::string& line : run.set_lines) text += Line("%s", line.c_str());
  if (run.children_unfollowed) text += Line("child processes were not followed (--no-children)");
  if (stats.children_held)
    text += Line("%s held at their fork until attached, %s each on average",
                 Counted(stats.children_held, "forked child", "forked children").c_str(),
                 FormatDuration(stats.children_held_ns / stats.children_held).c_str());
  if (stats.children_untraced)
    text += Line("%s traced only once attached, %s after their fork on average: what they ran before was missed (%s)",
                 Counted(stats.children_untraced, "forked child", "forked children").c_str(),
                 FormatDuration(stats.children_untraced_ns / stats.children_untraced).c_str(),
                 run.why_untraced_children.c_str());
  if (run.probes_left > 0)
    text += Line("%s the targets never hit stay in place, inert, until they exit or hit one (then pid %d removes "
                 "them); removing them now would slow a target for about %s (`kill -USR1 %d` does it)",
                 Counted(run.probes_left, "probe", "probes").c_str(), run.keeper_pid,
                 FormatDuration(run.probes_left * kSecond / kProbesRemovedPerSecond).c_str(), run.keeper_pid);
  return text;
}

}  // namespace torchprobe
