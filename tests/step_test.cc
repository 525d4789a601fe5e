// Training steps: ProfilerStep#N slices derived from the step marker, on
// synthetic trees and on real training loops (PyTorch 1.13), and report's
// per-step table; capture windows counted in steps (--steps, StepWindows).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/fakes.h"
#include "tests/test_support.h"
#include "userspace/model/step_slicer.h"
#include "userspace/report/report.h"
#include "userspace/report/step_summary.h"
#include "userspace/report/trace_reader.h"
#include "userspace/session/step_windows.h"

namespace torchprobe {
namespace {

// ---- Tier 1: the slicer on trees made here ----


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
  test::RecordingSink next;
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
  EXPECT_EQ(next.known_ops, ops.size());
}

TEST(StepSlicerTest, HeldTreesGoOnPastTheLimitAndMarkersMatchByName) {
  OpTable ops = {{"aten::mm", "", ""}, {"## LOOP 3 ##", "", "", kUserAnnotation}};
  test::RecordingSink next;
  StepSlicer slicer(&next, &ops, "## LOOP *", 3);
  for (uint64_t i = 0; i < 4; ++i) slicer.AddSliceTree(1, 1, {At(0, 0, 10 * i, 10 * i + 5)});
  EXPECT_EQ(next.trees.size(), 4u);  // past 3 held: handed on unstepped
  EXPECT_EQ(next.trees[3][0].depth, 0);
  EXPECT_TRUE(MatchesStepMarker("## LOOP 3 ##", "## LOOP *"));
  EXPECT_FALSE(MatchesStepMarker("## LOOP 3 ##", "## LOOP"));
  EXPECT_TRUE(MatchesStepMarker("aten::mm", "aten::mm"));
  EXPECT_FALSE(MatchesStepMarker("aten::mm_out", "aten::mm"));
}

// A loop under an annotation of its own: one top-level tree holding every
// marker. The steps are made inside it, at the markers' level.
TEST(StepSlicerTest, StepsUnderAnOuterAnnotationAreFoundAtTheMarkersLevel) {
  OpTable ops = {{"aten::mm", "", ""}, {"Optimizer.step#SGD.step", "", "", kUserAnnotation},
                 {"LOOP", "", "", kUserAnnotation}};
  test::RecordingSink next;
  StepSlicer slicer(&next, &ops, kDefaultStepMarker);
  // LOOP{ mm, step{mm}, mm, step, mm }: two steps, then a trailing mm.
  slicer.AddSliceTree(1, 1, {At(2, 0, 0, 100), At(0, 1, 10, 20), At(1, 1, 30, 40), At(0, 2, 31, 39),
                             At(0, 1, 50, 60), At(1, 1, 70, 80), At(0, 1, 90, 95)});
  std::string error;
  ASSERT_TRUE(slicer.Finish(TraceStats(), &error));
  EXPECT_EQ(next.stats.steps, 2u);
  ASSERT_EQ(next.trees.size(), 1u);
  std::vector<std::tuple<std::string, uint16_t, uint64_t, uint64_t>> got;
  for (const Slice& s : next.trees[0]) got.emplace_back(ops[s.op_id].name, s.depth, s.begin_ns, s.end_ns);
  std::vector<std::tuple<std::string, uint16_t, uint64_t, uint64_t>> want = {
      {"LOOP", 0, 0, 100},
      {"ProfilerStep#0", 1, 10, 40},
      {"aten::mm", 2, 10, 20},
      {"Optimizer.step#SGD.step", 2, 30, 40},
      {"aten::mm", 3, 31, 39},
      {"ProfilerStep#1", 1, 40, 80},  // begins where the last one ended
      {"aten::mm", 2, 50, 60},
      {"Optimizer.step#SGD.step", 2, 70, 80},
      {"aten::mm", 1, 90, 95}};
  EXPECT_EQ(got, want);
}

// A loop per epoch, each under its own annotation, all under one more: the
// steps are made inside each epoch; a marker inside a marker is one step;
// top-level steps before and after go on as before.
TEST(StepSlicerTest, StepsInsideEachEpochAndMarkersInsideMarkersCountOnce) {
  OpTable ops = {{"aten::mm", "", ""}, {"Optimizer.step#SGD.step", "", "", kUserAnnotation},
                 {"RUN", "", "", kUserAnnotation}, {"EPOCH", "", "", kUserAnnotation}};
  test::RecordingSink next;
  StepSlicer slicer(&next, &ops, kDefaultStepMarker);
  slicer.AddSliceTree(1, 1, {At(1, 0, 0, 5), At(1, 1, 1, 4)});  // one step at the top level
  slicer.AddSliceTree(1, 1, {At(2, 0, 10, 100),                          // RUN
                             At(3, 1, 10, 50), At(1, 2, 20, 30), At(1, 2, 40, 50),   // EPOCH: 2 steps
                             At(3, 1, 60, 100), At(1, 2, 70, 80), At(1, 2, 90, 95)});  // EPOCH: 2 steps
  std::string error;
  ASSERT_TRUE(slicer.Finish(TraceStats(), &error));
  EXPECT_EQ(next.stats.steps, 5u);
  ASSERT_EQ(next.trees.size(), 2u);
  EXPECT_EQ(ops[next.trees[0][0].op_id].name, "ProfilerStep#0");
  EXPECT_EQ(next.trees[0].size(), 3u);  // the step, the marker, the marker inside it
  std::vector<std::pair<std::string, uint16_t>> got;
  for (const Slice& s : next.trees[1]) got.emplace_back(ops[s.op_id].name, s.depth);
  std::vector<std::pair<std::string, uint16_t>> want = {
      {"RUN", 0},           {"EPOCH", 1},          {"ProfilerStep#1", 2}, {"Optimizer.step#SGD.step", 3},
      {"ProfilerStep#2", 2}, {"Optimizer.step#SGD.step", 3}, {"EPOCH", 1},          {"ProfilerStep#3", 2},
      {"Optimizer.step#SGD.step", 3}, {"ProfilerStep#4", 2}, {"Optimizer.step#SGD.step", 3}};
  EXPECT_EQ(got, want);
}

// The report's median of an even number of steps is the mean of the two
// middle ones (of two steps, not the longer).
TEST(StepSummaryTest, MedianOfAnEvenCountIsTheMiddlePairsMean) {
  std::ostringstream out;
  PrintSteps({{"ProfilerStep#0", 1, 1, 1000, 100}, {"ProfilerStep#1", 1, 1, 3000, 300}}, 0, out);
  EXPECT_NE(out.str().find("wall mean 2.000us median 2.000us; in ops mean 0.200us median 0.200us"), std::string::npos)
      << out.str();
  out.str("");
  PrintSteps({{"a", 1, 1, 1000, 0}, {"b", 1, 1, 9000, 0}, {"c", 1, 1, 2000, 0}}, 0, out);
  EXPECT_NE(out.str().find("median 2.000us;"), std::string::npos) << out.str();
}

// ---- StepWindows: windows counted in steps, on trees made here ----

TEST(StepWindowsTest, WindowOfSkipsThenCapturesAndRepeats) {
  WindowOptions once{.steps = 2, .skip_steps = 3};
  std::vector<int64_t> got;
  for (uint64_t n = 0; n < 8; ++n) got.push_back(StepWindows::WindowOf(once, n));
  EXPECT_EQ(got, (std::vector<int64_t>{-1, -1, -1, 0, 0, -1, -1, -1}));
  WindowOptions every{.steps = 2, .skip_steps = 1, .every_steps = 3};
  got.clear();
  for (uint64_t n = 0; n < 9; ++n) got.push_back(StepWindows::WindowOf(every, n));
  EXPECT_EQ(got, (std::vector<int64_t>{-1, 0, 0, -1, 1, 1, -1, 2, 2}));
  WindowOptions back_to_back{.steps = 2, .every_steps = 2};
  EXPECT_EQ(StepWindows::WindowOf(back_to_back, 0), 0);
  EXPECT_EQ(StepWindows::WindowOf(back_to_back, 3), 1);
  EXPECT_EQ(StepWindows::WindowOf({}, 0), -1) << "no --steps: no step window";
}

// One window's files, kept after StepWindows lets go of them.
struct WindowFiles {
  std::vector<std::vector<Slice>> trees;
  std::vector<uint32_t> threads;
  TraceStats stats;
  bool begun = false, finished = false;
};

class WindowSink : public TraceSink {
 public:
  explicit WindowSink(WindowFiles* files) : files_(files) {}
  void Begin(const OpTable&, const ClockSnapshot&) override { files_->begun = true; }
  void AddProcess(const ProcessInfo&) override {}
  void AddThread(const ThreadInfo& thread) override { files_->threads.push_back(thread.tid); }
  void AddSliceTree(uint32_t, uint32_t, const std::vector<Slice>& slices) override {
    files_->trees.push_back(slices);
  }
  bool Finish(const TraceStats& stats, std::string*) override {
    files_->stats = stats;
    files_->finished = true;
    return true;
  }

 private:
  WindowFiles* files_;
};

class StepWindowsFeed {
 public:
  explicit StepWindowsFeed(const WindowOptions& options)
      : windows_(options, std::make_unique<WindowSink>(&files[0]),
                 [this](int64_t n, std::string*) { return std::make_unique<WindowSink>(&files[n]); },
                 [] { return TraceStats(); }, [this](int64_t n, uint64_t first, uint64_t steps) {
                   written.push_back({n, first, steps});
                 }) {
    windows_.Begin(ops_, ClockSnapshot());
    windows_.AddThread({1, 1, "main"});
  }
  // Step `n` of thread 1, 10 ns long from 100 n, with one op inside.
  void Step(uint64_t n) {
    windows_.AddSliceTree(1, 1, {At(1, 0, 100 * n, 100 * n + 10), At(0, 1, 100 * n + 1, 100 * n + 9)});
  }
  // A top-level op of thread 2.
  void Other(uint64_t begin) { windows_.AddSliceTree(1, 2, {At(0, 0, begin, begin + 5)}); }
  // Steps `first` .. `first + count - 1` inside one LOOP tree, an op between each.
  void Loop(uint64_t first, uint64_t count) {
    std::vector<Slice> tree = {At(2, 0, 100 * first, 100 * (first + count))};
    for (uint64_t n = first; n < first + count; ++n) {
      tree.push_back(At(1, 1, 100 * n, 100 * n + 10));
      tree.push_back(At(0, 2, 100 * n + 1, 100 * n + 9));
      tree.push_back(At(0, 1, 100 * n + 20, 100 * n + 30));  // between steps: outside any
    }
    windows_.AddSliceTree(1, 1, tree);
  }
  StepWindows& windows() { return windows_; }

  std::map<int64_t, WindowFiles> files;
  std::vector<std::tuple<int64_t, uint64_t, uint64_t>> written;  // number, first step, steps

 private:
  OpTable ops_ = {{"aten::mm", "", ""}, {"ProfilerStep#", "", "", kUserAnnotation}, {"LOOP", "", "", kUserAnnotation}};
  StepWindows windows_;
};

// Steps inside an enclosing range (one tree): each window gets its steps
// whole, inside the range that encloses them; the rest is counted outside.
TEST(StepWindowsTest, StepsInsideAnEnclosingRangeAreWindowedWithIt) {
  StepWindowsFeed feed({.steps = 2, .skip_steps = 1, .every_steps = 3});
  feed.Loop(0, 6);
  ASSERT_EQ(feed.written.size(), 2u);
  EXPECT_EQ(feed.written[0], std::make_tuple(int64_t{0}, uint64_t{1}, uint64_t{2}));
  EXPECT_EQ(feed.written[1], std::make_tuple(int64_t{1}, uint64_t{4}, uint64_t{2}));
  std::vector<std::pair<uint16_t, uint64_t>> want0 = {{0, 0}, {1, 100}, {2, 101}, {1, 200}, {2, 201}};
  std::vector<std::pair<uint16_t, uint64_t>> got0;
  ASSERT_EQ(feed.files[0].trees.size(), 1u);
  for (const Slice& s : feed.files[0].trees[0]) got0.emplace_back(s.depth, s.begin_ns);
  EXPECT_EQ(got0, want0);
  ASSERT_EQ(feed.files[1].trees.size(), 1u);
  EXPECT_EQ(feed.files[1].trees[0].size(), 5u);
  EXPECT_EQ(feed.files[1].trees[0][1].begin_ns, 400u);
  std::string error;
  ASSERT_TRUE(feed.windows().Finish(TraceStats(), &error)) << error;
  // Left out by window 1's close: steps 0 and 3 (2 slices each) and the 5
  // ops between steps 0..5 (LOOP is in both windows).
  EXPECT_EQ(feed.files[1].stats.outside_steps, 9u);
}

TEST(StepWindowsTest, RepeatedWindowsHoldWholeStepsAndWhatBeganInThem) {
  StepWindowsFeed feed({.steps = 2, .skip_steps = 1, .every_steps = 3});
  feed.Other(50);  // during step 0, skipped
  for (uint64_t n = 0; n < 8; ++n) {
    feed.Step(n);
    if (n == 1) feed.Other(150);  // inside window 0 (it began at step 1's 100)
  }
  EXPECT_FALSE(feed.windows().done());
  ASSERT_EQ(feed.written.size(), 2u);
  EXPECT_EQ(feed.written[0], std::make_tuple(int64_t{0}, uint64_t{1}, uint64_t{2}));
  EXPECT_EQ(feed.written[1], std::make_tuple(int64_t{1}, uint64_t{4}, uint64_t{2}));
  std::string error;
  ASSERT_TRUE(feed.windows().Finish(TraceStats(), &error)) << error;
  ASSERT_EQ(feed.files.size(), 3u);
  const WindowFiles& w0 = feed.files[0];
  EXPECT_TRUE(w0.finished);
  ASSERT_EQ(w0.trees.size(), 3u);
  EXPECT_EQ(w0.trees[0][0].begin_ns, 100u);
  EXPECT_EQ(w0.trees[1][0].begin_ns, 150u) << "thread 2's op began inside the window";
  EXPECT_EQ(w0.trees[2][0].begin_ns, 200u);
  EXPECT_EQ(w0.stats.steps, 2u);
  EXPECT_EQ(w0.stats.outside_steps, 3u) << "thread 2's first op and step 0 (2 slices)";
  const WindowFiles& w1 = feed.files[1];
  EXPECT_TRUE(w1.begun);
  EXPECT_EQ(w1.threads, (std::vector<uint32_t>{1})) << "threads known before are described again";
  ASSERT_EQ(w1.trees.size(), 2u);
  EXPECT_EQ(w1.trees[0][0].begin_ns, 400u);
  EXPECT_EQ(w1.trees[1][0].begin_ns, 500u);
  // Window 2 was cut by the end after its first step: written with it.
  const WindowFiles& w2 = feed.files[2];
  EXPECT_TRUE(w2.finished);
  ASSERT_EQ(w2.trees.size(), 1u);
  EXPECT_EQ(w2.trees[0][0].begin_ns, 700u);
  EXPECT_EQ(w2.stats.steps, 1u);
}

TEST(StepWindowsTest, OneWindowIsDoneAfterItsStepsAndAnUnreachedOneIsWrittenEmpty) {
  StepWindowsFeed once({.steps = 2, .skip_steps = 1});
  for (uint64_t n = 0; n < 3; ++n) once.Step(n);
  EXPECT_TRUE(once.windows().done());
  once.Step(3);
  once.Other(350);
  std::string error;
  ASSERT_TRUE(once.windows().Finish(TraceStats(), &error)) << error;
  ASSERT_EQ(once.files.size(), 1u) << "no window after the only one";
  EXPECT_EQ(once.files[0].trees.size(), 2u);
  StepWindowsFeed unreached({.steps = 2, .skip_steps = 5});
  for (uint64_t n = 0; n < 3; ++n) unreached.Step(n);
  ASSERT_TRUE(unreached.windows().Finish(TraceStats(), &error)) << error;
  EXPECT_TRUE(unreached.files[0].finished) << "the files still appear, with their root nodes";
  EXPECT_TRUE(unreached.files[0].trees.empty());
  EXPECT_EQ(unreached.files[0].stats.outside_steps, 6u);
  ASSERT_EQ(unreached.written.size(), 1u);
  EXPECT_EQ(std::get<2>(unreached.written[0]), 0u);
}

// ---- Tier 2: real training loops ----

DecodedTrace Read(const std::string& path) {
  DecodedTrace trace;
  std::string error;
  EXPECT_TRUE(ReadTrace(path, &trace, &error)) << error;
  return trace;
}

// For each ProfilerStep# slice in order: how many direct children named by
// `marker` it has. Steps are top-level, or inside `parent` when given.
std::vector<std::pair<std::string, int>> Steps(const DecodedTrace& trace, const std::string& marker,
                                               const std::string& parent = "") {
  std::vector<std::pair<std::string, int>> steps;
  for (const DecodedThread& t : trace.threads) {
    std::vector<int> index(t.slices.size(), -1);
    for (size_t i = 0; i < t.slices.size(); ++i) {
      const DecodedSlice& s = t.slices[i];
      const std::string& name = trace.ops[s.op].name;
      if (name.starts_with(kStepPrefix)) {
        if (parent.empty()) EXPECT_EQ(s.parent, -1) << name;
        else EXPECT_TRUE(s.parent >= 0 && trace.ops[t.slices[s.parent].op].name == parent) << name;
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
  // train.py looping in the PyTorch 2.6 root, traced by `record --pid` with
  // `args`; skips without root or that root (callers check IsSkipped()).
  void RecordLoopOnPyTorch2(const std::vector<std::string>& args, DecodedTrace* trace) {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    std::string root = test::Torch2Root();
    if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
    std::string name = "/tmp/torchprobe-steps-" + std::to_string(getpid());
    ASSERT_EQ(test::RunCommand({"cp", test::TrainScript(), root + name + ".py"}).exit_code, 0);
    pid_t target = test::Spawn(
        test::Torch2Python(root, name + ".py", {"--steps", "100000000", "--ready-file", name + ".ready"}),
        "/dev/null");
    bool ready = test::WaitForFile(root + name + ".ready", 120);
    std::string out = dir_ + "/steps26.pftrace";
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "--pid", std::to_string(target),
                                     "-o", out};
    argv.insert(argv.end(), args.begin(), args.end());
    test::CommandResult r;
    if (ready) r = test::RunCommand(argv);
    kill(target, SIGKILL);
    test::Wait(target);
    for (const char* suffix : {".py", ".ready"}) unlink((root + name + suffix).c_str());
    ASSERT_TRUE(ready);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    *trace = Read(out);
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

// The loop under `record_function("LOOP")`: still one step per optimizer
// step, inside LOOP, with the default marker and when it is named.
TEST_F(StepTest, OneStepPerOptimizerStepUnderAnOuterAnnotation) {
  TP_REQUIRE_ROOT_AND_TORCH();
  for (bool named : {false, true}) {
    SCOPED_TRACE(named ? "--step-marker 'Optimizer.step#*'" : "default marker");
    std::string out = dir_ + "/wrapped.pftrace";
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "-o", out};
    if (named) argv.insert(argv.end(), {"--step-marker", "Optimizer.step#*"});
    argv.insert(argv.end(), {"--", test::Python(), test::TrainScript(), "--steps", "10", "--wrap", "LOOP"});
    test::CommandResult r = test::RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    DecodedTrace trace = Read(out);
    EXPECT_EQ(Steps(trace, "Optimizer.step#SGD.step", "LOOP"), Numbered(10));
    EXPECT_EQ(trace.stats.steps, 10u);
    std::ostringstream report;
    PrintReport(trace, report);
    EXPECT_NE(report.str().find("Training steps (ProfilerStep#): 10, wall mean"), std::string::npos)
        << report.str();
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
  DecodedTrace trace;
  RecordLoopOnPyTorch2({"--duration", "2"}, &trace);
  if (IsSkipped() || HasFatalFailure()) return;
  std::vector<std::pair<std::string, int>> steps = Steps(trace, "Optimizer.step#SGD.step");
  ASSERT_GE(steps.size(), 2u);
  EXPECT_EQ(steps, Numbered(static_cast<int>(steps.size())));
}

// The ProfilerStep# events of a Kineto-style file, in order.
std::vector<std::string> ChromeSteps(const std::string& path) {
  std::vector<std::string> steps;
  for (const auto& row : test::JsonFacts("chrome", path))
    if (row[0] == "event" && row.back().starts_with(kStepPrefix)) steps.push_back(row.back());
  return steps;
}

std::vector<std::pair<std::string, int>> NumberedFrom(int first, int n) {
  std::vector<std::pair<std::string, int>> want;
  for (int i = first; i < first + n; ++i) want.push_back({kStepPrefix + std::to_string(i), 1});
  return want;
}

// --skip-steps 3 --steps 4 on 12 steps: one set of files holding exactly
// ProfilerStep#3..#6, whole, each with its optimizer step; the rest counted.
TEST_F(StepTest, StepsWindowHoldsExactlyTheStepsAsked) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/w.pftrace";
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "--skip-steps", "3", "--steps", "4", "-o", out, "--chrome",
       dir_ + "/w.json", "--", test::Python(), test::TrainScript(), "--steps", "12"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("steps window 0 written: ProfilerStep#3 to ProfilerStep#6"), std::string::npos) << r.err;
  DecodedTrace trace = Read(out);
  EXPECT_EQ(Steps(trace, "Optimizer.step#SGD.step"), NumberedFrom(3, 4));
  EXPECT_EQ(trace.stats.steps, 4u);
  EXPECT_GT(trace.stats.outside_steps, 0u);
  std::ostringstream report;
  PrintReport(trace, report);
  EXPECT_NE(report.str().find("outside steps       " + std::to_string(trace.stats.outside_steps) + " slices"),
            std::string::npos)
      << report.str();
  // Nothing of the skipped steps: every op lies inside the window's steps.
  uint64_t first = ~uint64_t{0}, last = 0, outside = 0;
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices)
      if (trace.ops[s.op].name.starts_with(kStepPrefix)) {
        first = std::min(first, s.begin_ns);
        last = std::max(last, s.end_ns);
      }
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices) outside += s.begin_ns < first || s.end_ns > last;
  EXPECT_EQ(outside, 0u);
  EXPECT_EQ(ChromeSteps(dir_ + "/w.json"),
            (std::vector<std::string>{"ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"}));
}

// --every-steps: windows 2-4 and 7-9 of 12 steps, numbered files; the third
// (12-14) never began, so its files never appear.
TEST_F(StepTest, RepeatedStepsWindowsGiveNumberedFiles) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/r.pftrace";
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "--skip-steps", "2", "--steps", "3", "--every-steps", "5", "-o",
       out, "--et", dir_ + "/r.et.json", "--", test::Python(), test::TrainScript(), "--steps", "12"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The summary names the numbered files, not the paths given.
  EXPECT_NE(r.err.find("wrote " + dir_ + "/r.N.pftrace and " + dir_ + "/r.et.N.json: "), std::string::npos) << r.err;
  EXPECT_EQ(Steps(Read(dir_ + "/r.0.pftrace"), "Optimizer.step#SGD.step"), NumberedFrom(2, 3));
  EXPECT_EQ(Steps(Read(dir_ + "/r.1.pftrace"), "Optimizer.step#SGD.step"), NumberedFrom(7, 3));
  EXPECT_TRUE(test::FileExists(dir_ + "/r.et.1.json"));
  for (const char* absent : {"/r.2.pftrace", "/r.et.2.json", "/r.pftrace"})
    EXPECT_FALSE(test::FileExists(dir_ + absent)) << absent;
}

// PyTorch 2.6, attached by pid to an endless loop: the first (partial) step
// is skipped, torchprobe stops by itself once its window is written.
TEST_F(StepTest, StepsWindowOnPyTorch2AttachedByPid) {
  DecodedTrace trace;
  // --duration: only a bound, should the window never close.
  RecordLoopOnPyTorch2({"--skip-steps", "2", "--steps", "3", "--duration", "300"}, &trace);
  if (IsSkipped() || HasFatalFailure()) return;
  EXPECT_EQ(Steps(trace, "Optimizer.step#SGD.step"), NumberedFrom(2, 3));
  EXPECT_EQ(trace.stats.steps, 3u);
}

TEST_F(StepTest, StepMarkerNeedsAName) {
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "--step-marker", "*", "--",
                                            "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--step-marker"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace torchprobe
