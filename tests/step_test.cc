// Training steps: ProfilerStep#N slices derived from the step marker, on
// synthetic trees and on real training loops (PyTorch 1.13), and report's
// per-step table.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"
#include "userspace/model/step_slicer.h"
#include "userspace/report/report.h"
#include "userspace/report/step_summary.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

// ---- Tier 1: the slicer on trees made here ----

class Trees : public TraceSink {
 public:
  void Begin(const OpTable&, const ClockSnapshot&) override {}
  void AddOps(const OpTable& ops) override { known = ops.size(); }
  void AddProcess(const ProcessInfo&) override {}
  void AddThread(const ThreadInfo&) override {}
  void AddSliceTree(uint32_t, uint32_t tid, const std::vector<Slice>& slices) override {
    trees.push_back(slices);
  }
  bool Finish(const TraceStats& s, std::string*) override {
    stats = s;
    return true;
  }
  std::vector<std::vector<Slice>> trees;
  size_t known = 0;
  TraceStats stats;
};

Slice At(uint32_t op, uint16_t depth, uint64_t begin, uint64_t end) {
  Slice s;
  s.op_id = op;
  s.depth = depth;
  s.begin_ns = begin;
  s.end_ns = end;
  return s;
}

TEST(StepSlicerTest, MarkerTreesCloseStepsAndTheRestGoesOnUnstepped) {
  OpTable ops = {{"aten::mm", "", ""}, {"Optimizer.step#SGD.step", "", "", kUserAnnotation}};
  Trees next;
  StepSlicer slicer(&next, &ops, kDefaultStepMarker);
  slicer.AddSliceTree(1, 1, {At(0, 0, 10, 20)});
  slicer.AddSliceTree(1, 1, {At(1, 0, 30, 40), At(0, 1, 31, 39)});
  EXPECT_EQ(next.trees.size(), 1u);
  slicer.AddSliceTree(1, 1, {At(0, 0, 50, 60)});
  slicer.AddSliceTree(1, 1, {At(1, 0, 70, 80)});
  slicer.AddSliceTree(1, 1, {At(0, 0, 90, 95)});  // after the last marker
  slicer.AddSliceTree(1, 2, {At(0, 0, 90, 95), At(0, 1, 91, 92)});  // a thread that never steps
  EXPECT_EQ(next.trees.size(), 2u);
  std::string error;
  ASSERT_TRUE(slicer.Finish(TraceStats(), &error));
  EXPECT_EQ(next.stats.steps, 2u);
  ASSERT_EQ(next.trees.size(), 4u);
  // Step 0: from the first tree to the marker's end, both inside it.
  const std::vector<Slice>& first = next.trees[0];
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(ops[first[0].op_id].name, "ProfilerStep#0");
  EXPECT_EQ(ops[first[0].op_id].category, kUserAnnotation);
  EXPECT_EQ(first[0].begin_ns, 10u);
  EXPECT_EQ(first[0].end_ns, 40u);
  EXPECT_EQ(first[0].depth, 0);
  EXPECT_EQ(first[1].depth, 1);
  EXPECT_EQ(first[3].depth, 2);
  // Step 1 begins where step 0 ended.
  EXPECT_EQ(ops[next.trees[1][0].op_id].name, "ProfilerStep#1");
  EXPECT_EQ(next.trees[1][0].begin_ns, 40u);
  EXPECT_EQ(next.trees[1][0].end_ns, 80u);
  EXPECT_EQ(next.trees[1].size(), 3u);
  // What no marker closed goes on as it came.
  for (size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(next.trees[i][0].depth, 0);
    EXPECT_EQ(next.trees[i][0].begin_ns, 90u);
  }
  EXPECT_EQ(next.trees[3][1].depth, 1);
  EXPECT_EQ(next.known, ops.size());
}

TEST(StepSlicerTest, HeldTreesGoOnPastTheLimitAndMarkersMatchByName) {
  OpTable ops = {{"aten::mm", "", ""}, {"## LOOP 3 ##", "", "", kUserAnnotation}};
  Trees next;
  StepSlicer slicer(&next, &ops, "## LOOP *", 3);
  for (uint64_t i = 0; i < 4; ++i) slicer.AddSliceTree(1, 1, {At(0, 0, 10 * i, 10 * i + 5)});
  EXPECT_EQ(next.trees.size(), 4u);  // past 3 held: handed on unstepped
  EXPECT_EQ(next.trees[3][0].depth, 0);
  EXPECT_TRUE(MatchesStepMarker("## LOOP 3 ##", "## LOOP *"));
  EXPECT_FALSE(MatchesStepMarker("## LOOP 3 ##", "## LOOP"));
  EXPECT_TRUE(MatchesStepMarker("aten::mm", "aten::mm"));
  EXPECT_FALSE(MatchesStepMarker("aten::mm_out", "aten::mm"));
}

// ---- Tier 2: real training loops ----

DecodedTrace Read(const std::string& path) {
  DecodedTrace trace;
  std::string error;
  EXPECT_TRUE(ReadTrace(path, &trace, &error)) << error;
  return trace;
}

// For each ProfilerStep# slice in order: how many direct children named by
// `marker` it has.
std::vector<std::pair<std::string, int>> Steps(const DecodedTrace& trace, const std::string& marker) {
  std::vector<std::pair<std::string, int>> steps;
  for (const DecodedThread& t : trace.threads) {
    std::vector<int> index(t.slices.size(), -1);
    for (size_t i = 0; i < t.slices.size(); ++i) {
      const DecodedSlice& s = t.slices[i];
      const std::string& name = trace.ops[s.op].name;
      if (name.starts_with(kStepPrefix)) {
        EXPECT_EQ(s.parent, -1) << name;
        index[i] = static_cast<int>(steps.size());
        steps.push_back({name, 0});
      } else if (s.parent >= 0 && index[s.parent] >= 0 && MatchesStepMarker(name, marker)) {
        ++steps[index[s.parent]].second;
      }
    }
  }
  return steps;
}

class StepTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::MakeTempDir(); }
  void TearDown() override {
    test::RemoveTempDir(dir_);
  }
  std::string dir_;
};

std::vector<std::pair<std::string, int>> Numbered(int n) {
  std::vector<std::pair<std::string, int>> want;
  for (int i = 0; i < n; ++i) want.push_back({kStepPrefix + std::to_string(i), 1});
  return want;
}

TEST_F(StepTest, OneStepPerOptimizerStepOfATrainingLoop) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/train.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "-o", out, "--",
                                            test::Python(), test::TrainScript(), "--steps", "12"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = Read(out);
  EXPECT_EQ(Steps(trace, "Optimizer.step#SGD.step"), Numbered(12));
  EXPECT_EQ(trace.stats.steps, 12u);
  std::ostringstream report;
  PrintReport(trace, report);
  EXPECT_NE(report.str().find("Training steps (ProfilerStep#): 12, wall mean"), std::string::npos)
      << report.str();
  std::vector<StepSummary> steps = SummarizeSteps(trace);
  ASSERT_EQ(steps.size(), 12u);
  for (const StepSummary& s : steps) {
    EXPECT_GT(s.op_ns, 0u) << s.name;
    EXPECT_LE(s.op_ns, s.wall_ns) << s.name;
  }
}

TEST_F(StepTest, StepMarkerOnAUserAnnotation) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string script = test::TrainScript();
  script.replace(script.rfind("train.py"), 8, "annotations.py");
  std::string out = dir_ + "/loops.pftrace";
  test::CommandResult r =
      test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--step-marker", "## LOOP *", "-o", out, "--",
                        test::Python(), script, "--iterations", "15"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = Read(out);
  EXPECT_EQ(Steps(trace, "## LOOP *"), Numbered(15));
  // And nothing else: train.py's optimizer is not in this script.
  EXPECT_EQ(trace.stats.steps, 15u);
}

// PyTorch 2.6 (the trixie root), attached by pid to a running loop: each
// step whole and numbered on, one optimizer step in each.
TEST_F(StepTest, StepsOnPyTorch2AttachedByPid) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  if (test::RunCommand({"tools/torch2-root", "--check"}).exit_code != 0)
    GTEST_SKIP() << "no PyTorch 2.x root (tools/torch2-root builds it)";
  std::string root = test::RunCommand({"tools/torch2-root", "--print-path"}).out;
  root = root.substr(0, root.find('\n'));
  std::string name = "/tmp/torchprobe-steps-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", test::TrainScript(), root + name + ".py"}).exit_code, 0);
  pid_t target = test::Spawn({"unshare", "-m", "sh", "-c",
                              "mount -t proc proc \"$0/proc\" && exec chroot \"$0\" python3 " + name +
                                  ".py --steps 100000000 --ready-file " + name + ".ready",
                              root},
                             "/dev/null");
  bool ready = test::WaitForFile(root + name + ".ready", 120);
  std::string out = dir_ + "/steps26.pftrace";
  test::CommandResult r;
  if (ready)
    r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--pid", std::to_string(target),
                          "--duration", "2", "-o", out});
  kill(target, SIGKILL);
  test::Wait(target);
  for (const char* suffix : {".py", ".ready"}) unlink((root + name + suffix).c_str());
  ASSERT_TRUE(ready);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::pair<std::string, int>> steps = Steps(Read(out), "Optimizer.step#SGD.step");
  ASSERT_GE(steps.size(), 2u);
  EXPECT_EQ(steps, Numbered(static_cast<int>(steps.size())));
}

TEST_F(StepTest, StepMarkerNeedsAName) {
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "--step-marker", "*", "--",
                                            "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--step-marker"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace torchprobe
