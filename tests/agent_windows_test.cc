// What an agent's windows hold and what it says of them (issue 25): windows
// carry what the options ask of record (--memory, --shapes; --steps windows
// of whole steps with --et and --chrome beside them, read by the real
// consumers), the metrics' per-target gauges say what each target's last
// window showed, and the measured duty cycle stays within the budget from
// the first window on.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/agent_fixture.h"
#include "tests/test_support.h"
#include "userspace/agent/window_name.h"
#include "userspace/base/clock.h"
#include "userspace/report/step_summary.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

using namespace agent_test;  // NOLINT: the fixture and its helpers

// Perfetto's own reader finds no error and no data loss in `trace`.
void ExpectCleanStats(const std::string& trace) {
  if (test::TraceProcessor().empty()) return;
  auto rows = test::QueryTrace(trace, "select name, value from stats where value > 0 and severity != 'info'");
  EXPECT_TRUE(rows.empty()) << trace << ": " << (rows.empty() ? "" : rows[0][0]);
}

// Done-when 3, --memory and --shapes: each window's Perfetto file holds the
// allocations and the ops' Tensor arguments, as record's would; and the
// Python stacks and thread states when the agent has those flags.
TEST_F(AgentTest, WindowsCarryMemoryShapesStacksAndThreadStates) {
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  pid_t train = StartTrain("carry");
  StartAgent({"--every", "1", "--window", "0.5", "--budget", "none", "--memory", "--shapes", "--python-stacks",
              "--sched", "--plan-cache", dir_ + "/plans"});
  ASSERT_TRUE(test::WaitUntil([&] { return WindowsOf(train) >= 2; }, kBound)) << Log();
  EXPECT_EQ(StopAgent(), 0) << Log();
  std::vector<JsonValue> index = ReadIndex(out_);
  ASSERT_GE(index.size(), 2u);
  size_t states = 0, lines = 0;
  for (const JsonValue& entry : index) {
    std::string file = out_ + "/" + Str(entry, "file");
    DecodedTrace trace;
    std::string error;
    ASSERT_TRUE(ReadTrace(file, &trace, &error)) << error;
    if (trace.stats.op_slices == 0) continue;  // the agent's stop may cut the last one short
    EXPECT_EQ(trace.stats.memory_traced, 1u) << file;
    EXPECT_GT(trace.memory.size(), 0u) << file << ": no allocation in a window of a training loop";
    EXPECT_EQ(trace.stats.shapes_traced, 1u) << file;
    if (!test::TraceProcessor().empty()) {
      auto dims = test::QueryTrace(file, "select count(*) from args where key = 'debug.Input Dims'");
      ASSERT_FALSE(dims.empty());
      EXPECT_GT(std::stoull(dims[0][0]), 10u) << file;
    }
    ExpectCleanStats(file);
    EXPECT_TRUE(Companions(entry).empty());
    states += trace.thread_states.size();
    for (const DecodedThread& thread : trace.threads)
      for (const DecodedSlice& slice : thread.slices) lines += slice.python_line >= 0;
  }
  // --sched and --python-stacks reach the windows too (over all of them: a
  // half-second window of a busy loop may see no switch).
  EXPECT_GT(states, 0u);
  EXPECT_GT(lines, 0u);
  ExpectIndexMatchesFiles(out_);
}

// Issue 28, 4: ten windows of a loop that keeps 1 KiB a step (memory_steps.py
// --leak's list) beside the same loop without the leak: the index and the
// metrics name the leaking op, growing window after window, with the line
// that keeps it; the loop that frees what it makes shows nothing growing.
TEST_F(AgentTest, AGrowingLeakIsNamedInTheIndexAndMetrics) {
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  std::string script = test::TrainScript();
  script.replace(script.rfind("train.py"), 8, "memory_steps.py");
  pid_t pids[2];
  for (int leak = 0; leak < 2; ++leak) {
    std::string ready = dir_ + "/" + token_ + (leak ? ".leak" : ".steady") + ".ready";
    std::vector<std::string> argv = {test::Python(), script, "--steps", "100000000", "--ready-file", ready};
    if (leak) argv.push_back("--leak");
    pids[leak] = test::Spawn(argv, "/dev/null");
    targets_.push_back(pids[leak]);
    ASSERT_TRUE(test::WaitForFile(ready, kBound));
  }
  StartAgent({"--every", "1", "--window", "0.5", "--budget", "none", "--memory", "--python-stacks", "--metrics",
              "127.0.0.1:0"});
  ASSERT_TRUE(test::WaitUntil([&] { return WindowsOf(pids[1]) >= 10 && WindowsOf(pids[0]) >= 10; }, 3 * kBound))
      << Log();
  std::map<std::string, double> metrics = MetricsNow(Log());
  EXPECT_EQ(StopAgent(), 0) << Log();
  int leak_line = 0;
  {
    std::istringstream lines(test::ReadFile(script));
    int n = 0;
    for (std::string line; std::getline(lines, line);)
      if (++n, line.find("kept.append(") != std::string::npos) leak_line = n;
  }
  ASSERT_GT(leak_line, 0);
  std::string place = "memory_steps.py(" + std::to_string(leak_line) + "): loop";
  size_t growing_windows[2] = {0, 0};
  uint64_t most_windows = 0;
  for (const JsonValue& entry : ReadIndex(out_)) {
    int leak = Num(entry, "pid") == static_cast<uint64_t>(pids[1]);
    const JsonValue* growing = entry.Find("growing");
    if (!growing) continue;
    ++growing_windows[leak];
    ASSERT_EQ(growing->kind, JsonValue::kArray);
    ASSERT_FALSE(growing->items.empty());
    const JsonValue& top = growing->items.front();  // the most bytes
    EXPECT_EQ(Str(top, "op"), "aten::mul") << Str(entry, "file");
    EXPECT_NE(Str(top, "line").find(place), std::string::npos) << Str(top, "line") << " vs " << place;
    EXPECT_GE(Num(top, "windows"), 3u);
    EXPECT_GE(Num(top, "bytes"), Num(top, "windows") * 1024);
    most_windows = std::max(most_windows, Num(top, "windows"));
  }
  EXPECT_EQ(growing_windows[0], 0u) << "the loop that frees what it makes grows nothing";
  EXPECT_GE(growing_windows[1], 6u) << "ten windows: growing from the third on";
  EXPECT_GE(most_windows, 8u) << "a leak candidate in every window, in a row";
  // The leaking target's sample for aten::mul (its other labels are the host's to fill).
  auto sample = [&](const std::string& family) {
    std::string pid = family + "{pid=\"" + std::to_string(pids[1]) + "\"";
    for (const auto& [name, value] : metrics)
      if (name.starts_with(pid) && name.ends_with(",op=\"aten::mul\"}")) return value;
    return -1.0;
  };
  EXPECT_GE(sample("torchprobe_target_leak_growing_windows"), 3.0);
  EXPECT_GE(sample("torchprobe_target_leak_growing_bytes"), 3.0 * 1024);
  for (const auto& [name, value] : metrics) {
    bool leak = name.find("leak_growing") != std::string::npos;
    EXPECT_FALSE(leak && name.find("pid=\"" + std::to_string(pids[0]) + "\"") != std::string::npos) << name;
  }
  ExpectIndexMatchesFiles(out_);
}

// Done-when 3, --steps 1 with --et and --chrome: each window is one whole
// step (the step it attached in is partial, and left out), its ET and
// Kineto JSON beside it, indexed with it, and HTA, Chakra and PARAM read
// the pair. Rotation takes a window's companions with it.
TEST_F(AgentTest, StepsWindowsCarryEtAndKinetoJson) {
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  pid_t train = StartTrain("steps");
  StartAgent({"--every", "1", "--steps", "1", "--et", "--chrome", "--budget", "none", "--max-files", "3",
              "--plan-cache", dir_ + "/plans"});
  ASSERT_TRUE(test::WaitUntil([&] { return WindowsOf(train) >= 3 && Log().find("-w4.pftrace") != std::string::npos; },
                              kBound))
      << Log();
  EXPECT_EQ(StopAgent(), 0) << Log();
  std::vector<JsonValue> index = ReadIndex(out_);
  ASSERT_LE(index.size(), 3u) << "--max-files 3";
  ExpectIndexMatchesFiles(out_);  // the rotated windows' companions are gone with them
  size_t checked = 0;
  for (const JsonValue& entry : index) {
    std::string file = out_ + "/" + Str(entry, "file");
    DecodedTrace trace;
    std::string error;
    ASSERT_TRUE(ReadTrace(file, &trace, &error)) << error;
    std::vector<StepSummary> steps = SummarizeSteps(trace);
    if (steps.empty()) continue;  // the agent's stop ended it before its step
    EXPECT_EQ(steps.size(), 1u) << file;
    EXPECT_EQ(Num(entry, "steps"), 1u);
    EXPECT_EQ(Num(entry, "step_max_ns"), steps[0].wall_ns);
    // Whole: the step holds the forward's first op (a convolution) and the
    // optimizer's step.
    bool forward = false, optimizer = false;
    for (const DecodedThread& thread : trace.threads)
      for (const DecodedSlice& slice : thread.slices) {
        forward |= trace.ops[slice.op].name == "aten::convolution";
        optimizer |= trace.ops[slice.op].name.starts_with("Optimizer.step#");
      }
    EXPECT_TRUE(forward && optimizer) << file << ": not a whole step";
    std::vector<std::string> companions = Companions(entry);
    ASSERT_EQ(companions.size(), 2u) << Str(entry, "file");
    EXPECT_EQ(companions[0], CompanionName(Str(entry, "file"), kEtSuffix));
    EXPECT_EQ(companions[1], CompanionName(Str(entry, "file"), kKinetoSuffix));
    ExpectCleanStats(file);
    if (checked++ == 0) {
      test::CommandResult r =
          test::CheckEtKineto(out_ + "/" + companions[0], out_ + "/" + companions[1], dir_ + "/validate");
      if (test::ValidatorsMissing(r)) GTEST_SKIP() << "validators lack their Python packages (check-et-kineto --install-deps)";
      for (const char* step : {"et-format", "ids", "et_replay", "hta-validate", "hta-load"})
        EXPECT_NE(r.out.find(std::string("PASS ") + step + ":"), std::string::npos) << step << "\n" << r.out;
      EXPECT_EQ(r.out.find("\nFAIL "), std::string::npos) << r.out;
    }
  }
  EXPECT_GT(checked, 0u) << "no window held a step";
}

// Done-when 5: the per-target gauges are Prometheus text (label values
// escaped: a job name is the target's to choose) and say what the target's
// last window shows: its ProfilerStep count, median and longest.
TEST_F(AgentTest, TargetGaugesMatchTheirLastWindow) {
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  std::string job = "job \"7\"\\x";
  pid_t train = StartTrain("gauges", {"RANK=3", "TORCHELASTIC_RUN_ID=" + job});
  StartAgent({"--every", "1", "--steps", "3", "--budget", "none", "--metrics", "127.0.0.1:0", "--plan-cache",
              dir_ + "/plans"});
  std::string labels = "{pid=\"" + std::to_string(train) + "\",rank=\"3\",job=\"job \\\"7\\\"\\\\x\",container=\"\"}";
  // The gauges of the window the index lists last, read while no other
  // window was written in between.
  std::map<std::string, double> metrics;
  JsonValue last;
  ASSERT_TRUE(test::WaitUntil(
      [&] {
        std::vector<JsonValue> before = ReadIndex(out_);
        metrics = MetricsNow(Log());
        std::vector<JsonValue> after = ReadIndex(out_);
        if (after.size() < 2 || before.size() != after.size() || !Num(after.back(), "steps")) return false;
        last = after.back();
        return metrics["torchprobe_target_windows_total" + labels] == static_cast<double>(after.size());
      },
      kBound))
      << Log();
  EXPECT_EQ(StopAgent(), 0) << Log();
  EXPECT_EQ(Str(last, "job"), job);
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out_ + "/" + Str(last, "file"), &trace, &error)) << error;
  std::vector<StepSummary> steps = SummarizeSteps(trace);
  ASSERT_EQ(steps.size(), 3u);
  std::vector<uint64_t> walls;
  for (const StepSummary& step : steps) walls.push_back(step.wall_ns);
  EXPECT_EQ(metrics["torchprobe_target_steps" + labels], 3);
  EXPECT_NEAR(metrics["torchprobe_target_step_p50_seconds" + labels], MedianNs(walls) / 1e9, 1e-9);
  EXPECT_NEAR(metrics["torchprobe_target_step_max_seconds" + labels],
              *std::max_element(walls.begin(), walls.end()) / 1e9, 1e-9);
  EXPECT_GT(metrics["torchprobe_target_op_seconds" + labels], 0);
  EXPECT_LE(metrics["torchprobe_target_op_seconds" + labels], 3 * metrics["torchprobe_target_step_max_seconds" + labels]);
  EXPECT_NEAR(metrics["torchprobe_target_probe_cost_seconds" + labels], Num(last, "cost_ns") / 1e9, 1e-9);
  EXPECT_EQ(metrics.count("torchprobe_target_gpu_busy_seconds" + labels), 0u) << "no GPU here: no gauge, not 0";
}

// The budget holds from the first window on: sampled twice a second while
// the agent runs windows as often as it may, the measured duty cycle never
// exceeds --budget, and the first window waited until the target had run
// long enough to afford one (not taken during its start-up).
TEST_F(AgentTest, TheDutyCycleNeverExceedsTheBudget) {
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  pid_t train = StartTrain("budget");
  StartAgent({"--every", "0.3", "--window", "0.2", "--budget", "10", "--metrics", "127.0.0.1:0", "--plan-cache",
              dir_ + "/plans"});
  uint64_t start = NowNs();
  double highest = 0;
  size_t samples = 0;
  while (NowNs() - start < 25'000'000'000ull) {
    std::map<std::string, double> metrics = MetricsNow(Log());
    highest = std::max(highest, metrics["torchprobe_agent_duty_cycle"]);
    ++samples;
    usleep(500'000);
  }
  std::map<std::string, double> metrics = MetricsNow(Log());
  EXPECT_EQ(StopAgent(), 0) << Log();
  EXPECT_GE(WindowsOf(train), 2u) << Log();
  EXPECT_GT(metrics["torchprobe_agent_windows_skipped_total"], 0) << "every 0.3 s is more than 10% allows";
  EXPECT_LE(highest, 0.10) << "over " << samples << " samples\n" << Log();
  EXPECT_GT(highest, 0.0);
}

}  // namespace
}  // namespace torchprobe
