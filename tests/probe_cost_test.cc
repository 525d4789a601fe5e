// The probe cost calibration (userspace/attach/probe_cost.h): real probes on
// torchprobe's own child, as root. No absolute timing is asserted: only that
// each route's cost is measured, positive and bounded, and that `ret` probes
// (single-stepped) cost more than a uretprobe.
#include <unistd.h>

#include <ctime>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/attach/probe_cost.h"
#include "userspace/attach/uprobe_multi.h"
#include "userspace/discover/calibration_op.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

TEST(ProbeCostTest, FindsTheCalibrationFunctionLikeAnOp) {
  StatusOr<OpProbe> op = FindCalibrationOp();
  ASSERT_TRUE(op.ok()) << op.status().message();
  EXPECT_EQ(op->return_offsets.size(), 1u);  // its one `ret`
  EXPECT_GT(op->return_offsets[0], op->file_offset);
  EXPECT_EQ(torchprobe_calibration_op(41), 41u);
}

TEST(ProbeCostTest, PerOpCostFollowsTheRoutesUsed) {
  ProbeCost cost{.uretprobe_ns = 1000, .ret_ns = 11000, .took_ns = 30'000'000};
  TraceStats uret;
  uret.uretprobe_processes = 2;
  PutProbeCost(cost, &uret);
  EXPECT_EQ(uret.probe_ns_per_op, 1000u);
  EXPECT_EQ(uret.probe_ns_ret, 11000u);
  EXPECT_EQ(uret.probe_ns_calibration, 30'000'000u);
  TraceStats ret;  // --returns ret: no process counted either way
  PutProbeCost(cost, &ret);
  EXPECT_EQ(ret.probe_ns_per_op, 11000u);
  TraceStats mixed;
  mixed.uretprobe_processes = 1;
  mixed.ret_fallbacks = 1;
  PutProbeCost(cost, &mixed);
  EXPECT_EQ(mixed.probe_ns_per_op, 6000u);
}

TEST(ProbeCostTest, SummaryCountsOpsThatReturned) {
  TraceStats stats;
  EXPECT_EQ(ProbeCostSummary(stats), "");  // not calibrated
  stats.probe_ns_per_op = 1000;
  EXPECT_EQ(ProbeCostSummary(stats), "; probe cost 1.0 us per op");  // no op time
  stats.op_slices = 10;
  stats.unwound = 2;  // their return probes never fired
  stats.op_time_ns = 80'000;
  EXPECT_EQ(ProbeCostSummary(stats), "; probe cost 1.0 us per op, 10.0% of the time inside ops");
}

// The routes measured on the calibration function, planned as record plans it.
StatusOr<ProbeCost> Measure(bool uretprobe, bool ret, bool use_uprobe_multi) {
  ProbeCostRoutes routes;
  routes.uretprobe = uretprobe;
  routes.ret = ret;
  routes.use_uprobe_multi = use_uprobe_multi;
  StatusOr<OpProbe> op = FindCalibrationOp();
  if (!op.ok()) return op.status();
  routes.entry_offset = op->file_offset;
  routes.return_offsets = op->return_offsets;
  return MeasureProbeCost(routes);
}

TEST(ProbeCostTest, RetProbesCostMoreThanUretprobes) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  if (!HaveUprobeMulti()) GTEST_SKIP() << "uretprobe returns need uprobe_multi links";
  StatusOr<ProbeCost> cost = Measure(/*uretprobe=*/true, /*ret=*/true, /*use_uprobe_multi=*/true);
  ASSERT_TRUE(cost.ok()) << cost.status().message();
  RecordProperty("uretprobe_ns", std::to_string(cost->uretprobe_ns));
  RecordProperty("ret_ns", std::to_string(cost->ret_ns));
  RecordProperty("took_ns", std::to_string(cost->took_ns));
  EXPECT_GT(cost->uretprobe_ns, 0u);
  EXPECT_LT(cost->uretprobe_ns, kSecond);
  EXPECT_GT(cost->ret_ns, cost->uretprobe_ns);
  EXPECT_LT(cost->ret_ns, kSecond);
  EXPECT_GT(cost->took_ns, 0u);
}

TEST(ProbeCostTest, PerSymbolUprobesToo) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  StatusOr<ProbeCost> cost = Measure(/*uretprobe=*/false, /*ret=*/true, /*use_uprobe_multi=*/false);
  ASSERT_TRUE(cost.ok()) << cost.status().message();
  EXPECT_EQ(cost->uretprobe_ns, 0u);  // not asked for
  EXPECT_GT(cost->ret_ns, 0u);
  EXPECT_LT(cost->ret_ns, kSecond);
}

// record calibrates beside the attach and puts the cost in the trace's stats
// and its summary line.
TEST(ProbeCostTest, RecordPutsItInTheTraceAndTheSummary) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  if (!test::FileExists(test::FixturePath("op_storm"))) GTEST_SKIP() << "fixtures not built (make test)";
  std::string dir = test::MakeTempDir(), out = dir + "/cost.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "--returns", "ret", "-o", out,
                                            "--", test::FixturePath("op_storm"), "300"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  unlink(out.c_str());
  rmdir(dir.c_str());
  const TraceStats& s = trace.stats;
  EXPECT_GT(s.probe_ns_ret, 0u);
  EXPECT_EQ(s.probe_ns_uretprobe, 0u) << "--returns ret: uretprobe programs not loaded";
  EXPECT_EQ(s.probe_ns_per_op, s.probe_ns_ret) << "every op of this trace was `ret`-probed";
  EXPECT_GT(s.probe_ns_calibration, 0u);
  EXPECT_EQ(s.op_slices, trace.slice_count());
  EXPECT_EQ(s.op_slices, 600u);
  EXPECT_GT(s.op_time_ns, 0u);
  EXPECT_NE(r.err.find("; probe cost "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" us per op, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("% of the time inside ops\n"), std::string::npos) << r.err;
}

// Short captures with a plan cache (the agent's windows) measure the cost
// once and keep it a while: the second record on the same host, boot and
// binary takes it, says so in the trace and the report, and measures it
// again when the kept one is too old or not its own file.
TEST(ProbeCostTest, AKeptCostIsUsedSaidAndRefusedWhenStaleOrNotOurs) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  if (!test::FileExists(test::FixturePath("op_storm"))) GTEST_SKIP() << "fixtures not built (make test)";
  std::string dir = test::MakeTempDir(), cache = dir + "/plans";
  auto record = [&](const std::string& name, DecodedTrace* trace) {
    test::CommandResult r = test::RunCommand({"env", "TORCHPROBE_PLAN_CACHE=" + cache, test::TorchprobeBinary(),
                                              "record", "-o", dir + "/" + name, "--", test::FixturePath("op_storm"),
                                              "300"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::string error;
    ASSERT_TRUE(ReadTrace(dir + "/" + name, trace, &error)) << error;
  };
  DecodedTrace first, second, stale;
  record("first.pftrace", &first);
  EXPECT_EQ(first.stats.CountOf("ops.probe_cost_kept"), 0u) << "nothing kept yet: measured";
  ASSERT_GT(first.stats.probe_ns_per_op, 0u);
  record("second.pftrace", &second);
  EXPECT_EQ(second.stats.CountOf("ops.probe_cost_kept"), 1u);
  EXPECT_LE(second.stats.CountOf("ops.probe_cost_age_s"), 120u);
  EXPECT_EQ(second.stats.probe_ns_per_op, first.stats.probe_ns_per_op) << "the kept measurement";
  test::CommandResult report = test::RunCommand({test::TorchprobeBinary(), "report", dir + "/second.pftrace"});
  EXPECT_NE(report.out.find("s before this trace by an earlier run"), std::string::npos) << report.out;
  // Measured 700 s ago: too old, measured again.
  std::string kept = test::ReadFile(cache + "/probe-cost-v1.txt");
  size_t bar = kept.find('|');
  ASSERT_NE(bar, std::string::npos) << kept;
  std::string old_line = kept.substr(0, bar + 1) + std::to_string(time(nullptr) - 700) +
                         kept.substr(kept.find(' ', bar));
  test::WriteFile(cache + "/probe-cost-v1.txt", old_line);
  record("stale.pftrace", &stale);
  EXPECT_EQ(stale.stats.CountOf("ops.probe_cost_kept"), 0u) << old_line;
  // Another user's file is not read.
  ASSERT_EQ(chown((cache + "/probe-cost-v1.txt").c_str(), 65534, 65534), 0);
  DecodedTrace theirs;
  record("theirs.pftrace", &theirs);
  EXPECT_EQ(theirs.stats.CountOf("ops.probe_cost_kept"), 0u);
  test::RunCommand({"rm", "-rf", dir});
}

}  // namespace
}  // namespace torchprobe
