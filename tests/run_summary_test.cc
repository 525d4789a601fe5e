// The record run's closing lines and the stats a capture window starts
// with, as units: no BPF, no target.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/test_support.h"
#include "userspace/base/trace_stats.h"
#include "userspace/export/chrome_trace_writer.h"
#include "userspace/export/perfetto_writer.h"
#include "userspace/report/json_trace_reader.h"
#include "userspace/report/trace_reader.h"
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

// A probe set's own counts ("set.count"): carried by the scope they were
// declared with, written by every writer and read back by the report.
TEST(TraceStatsTest, ASetsSectionCountsAreCarriedByTheirScopeWrittenAndReadBack) {
  TraceStats stats;
  stats.Count("stacks.walked") = 7;
  stats.Count("stacks.code_objects", StatsScope::kRun) = 2;
  stats.Count("stacks.walked") += 1;  // named again: the same count, its scope kept
  TraceStats next = NextWindowStats(stats);
  EXPECT_EQ(next.CountOf("stacks.walked"), 0u);
  EXPECT_EQ(next.CountOf("stacks.code_objects"), 2u);
  EXPECT_EQ(next.CountOf("stacks.never"), 0u);

  std::string dir = test::MakeTempDir(), error;
  std::string perfetto = dir + "/t.pftrace", chrome = dir + "/t.json";
  std::unique_ptr<TraceSink> writers[] = {PerfettoWriter::Open(perfetto, &error),
                                          ChromeTraceWriter::Open(chrome, &error)};
  for (auto& writer : writers) {
    ASSERT_NE(writer, nullptr) << error;
    writer->Begin({{"aten::mul", "Tensor", ""}}, ClockSnapshot{1000, 1000});
    writer->AddProcess({10, "python3", "python3 x.py"});
    writer->AddThread({10, 10, "python3"});
    writer->AddSliceTree(10, 10, {{2000, 3000, 0, 0, 0}});
    ASSERT_TRUE(writer->Finish(stats, &error)) << error;
  }
  DecodedTrace from_perfetto, from_json;
  ASSERT_TRUE(ReadTrace(perfetto, &from_perfetto, &error)) << error;
  ASSERT_TRUE(ReadJsonTrace(chrome, &from_json, &error)) << error;
  for (const DecodedTrace* trace : {&from_perfetto, &from_json}) {
    EXPECT_EQ(trace->stats.CountOf("stacks.walked"), 8u);
    EXPECT_EQ(trace->stats.CountOf("stacks.code_objects"), 2u);
    EXPECT_EQ(trace->stats.sections.size(), 2u);
  }
  if (!test::TraceProcessor().empty()) {  // as the Perfetto UI shows it
    std::vector<std::vector<std::string>> rows =
        test::QueryTrace(perfetto, "select key, int_value from args where key like '%walked%'");
    ASSERT_EQ(rows.size(), 1u) << (rows.empty() ? "no row" : rows[0][0]);
    EXPECT_EQ(rows[0][1], "8") << rows[0][0];
    EXPECT_EQ(rows[0][0], "debug.torchprobe.stacks.walked");  // its section a dict of its own
  }
  test::RemoveTempDir(dir);
}

}  // namespace
}  // namespace torchprobe
