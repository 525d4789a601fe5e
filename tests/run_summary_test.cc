// The record run's closing lines and the stats a capture window starts
// with, as units: no BPF, no target.
#include <gtest/gtest.h>

#include <string>

#include "userspace/base/trace_stats.h"
#include "userspace/session/run_summary.h"

namespace torchprobe {
namespace {

TEST(RunSummaryTest, SaysWhatWasWrittenTracedHeldAndLeft) {
  TraceStats stats;
  stats.attach_mode = "uprobe_multi";
  stats.probed_symbols = 12;
  stats.children_held = 2;
  stats.children_held_ns = 4'000'000;
  stats.children_untraced = 1;
  stats.children_untraced_ns = 61'000'000;
  RunSummary run;
  run.outputs = "t.pftrace";
  run.events = 1000;
  run.traced = {"10 python3 a.py", "11 python3 a.py (child of 10)"};
  run.set_lines = {"memory: 3 allocations"};
  run.why_untraced_children = "--no-hold-children";
  run.probes_left = 40;
  run.keeper_pid = 77;
  std::string text = FormatRunSummary(run, stats);
  for (const char* line :
       {"torchprobe: wrote t.pftrace: 1000 op events, 0 dropped,",
        "torchprobe: traced 10 python3 a.py, 11 python3 a.py (child of 10)\n",
        "torchprobe: memory: 3 allocations\n",
        "torchprobe: 2 forked children held at their fork until attached, 2 ms each on average\n",
        "torchprobe: 1 forked child traced only once attached, 61 ms after their fork on average: what they ran "
        "before was missed (--no-hold-children)\n",
        "torchprobe: 40 probes the targets never hit stay in place, inert, until they exit or hit one (then pid 77 "
        "removes them); removing them now would slow a target for about 2.0 s (`kill -USR1 77` does it)\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n---\n" << text;
  EXPECT_EQ(text.find("not followed"), std::string::npos);
  run.children_unfollowed = true;
  EXPECT_NE(FormatRunSummary(run, stats).find("child processes were not followed (--no-children)"),
            std::string::npos);
}

TEST(RunSummaryTest, NothingHeldNothingLeftSaysNothingOfThem) {
  TraceStats stats;
  RunSummary run;
  run.outputs = "t.pftrace";
  std::string text = FormatRunSummary(run, stats);
  EXPECT_EQ(text.find("held"), std::string::npos) << text;
  EXPECT_EQ(text.find("never hit"), std::string::npos) << text;
  EXPECT_EQ(text.find("traced "), std::string::npos) << text;
}

// A capture window begins with what planning and attaching counted, and
// nothing of the window before: the rule is declared with each field.
TEST(TraceStatsTest, ANewWindowKeepsTheRunsCountsOnly) {
  TraceStats stats;
  stats.events = 5;
  stats.dropped_events = 2;
  stats.probed_symbols = 12;
  stats.unresolved_symbols = 1;
  stats.ret_fallbacks = 1;
  stats.attach_mode = "uprobe";
  TraceStats next = NextWindowStats(stats);
  EXPECT_EQ(next.events, 0u);
  EXPECT_EQ(next.dropped_events, 0u);
  EXPECT_EQ(next.probed_symbols, 12u);
  EXPECT_EQ(next.unresolved_symbols, 1u);
  EXPECT_EQ(next.ret_fallbacks, 1u);
  EXPECT_EQ(next.attach_mode, "uprobe");
  size_t run_scoped = 0;
  for (const StatsField& field : kStatsFields) run_scoped += field.scope == StatsScope::kRun;
  EXPECT_EQ(run_scoped, 6u) << "probed, unresolved, without returns, catch probes, uretprobe and ret processes";
}

}  // namespace
}  // namespace torchprobe
