// Capture windows: WindowSchedule's slots and toggles as pure logic, then
// `record --pid` on a training loop that runs until told to stop: timed
// windows give one valid set of files each, SIGUSR1 on/off twice gives two,
// an idle target still gives files with their root nodes.
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"
#include "userspace/export/execution_trace_writer.h"
#include "userspace/session/window_schedule.h"

namespace torchprobe {
namespace {

constexpr uint64_t kS = 1'000'000'000;
constexpr uint64_t kT0 = 100 * kS;

TEST(WindowScheduleTest, OneWindowToTheEndAfterStartAfter) {
  WindowSchedule plain({}, kT0);
  EXPECT_EQ(plain.Slot(kT0), 0);
  EXPECT_EQ(plain.Slot(kT0 + 1000 * kS), 0);
  EXPECT_FALSE(plain.numbered());
  WindowSchedule later({.start_after_s = 2}, kT0);
  EXPECT_EQ(later.Slot(kT0 + kS), WindowSchedule::kClosed);
  EXPECT_EQ(later.Slot(kT0 + 2 * kS), 0);
  EXPECT_EQ(later.Slot(kT0 + 9 * kS), 0);
}

TEST(WindowScheduleTest, WindowsEveryPeriodOrBackToBack) {
  WindowSchedule every({.start_after_s = 1, .window_s = 0.5, .every_s = 2}, kT0);
  EXPECT_TRUE(every.numbered());
  EXPECT_EQ(every.Slot(kT0 + kS / 2), WindowSchedule::kClosed);
  EXPECT_EQ(every.Slot(kT0 + kS), 0);
  EXPECT_EQ(every.Slot(kT0 + kS + kS / 2 - 1), 0);
  EXPECT_EQ(every.Slot(kT0 + kS + kS / 2), WindowSchedule::kClosed);
  EXPECT_EQ(every.Slot(kT0 + 3 * kS + 1), 1);
  EXPECT_EQ(every.Slot(kT0 + 5 * kS + kS / 4), 2);
  WindowSchedule back_to_back({.window_s = 1}, kT0);
  EXPECT_EQ(back_to_back.Slot(kT0 + kS / 2), 0);
  EXPECT_EQ(back_to_back.Slot(kT0 + kS), 1);
  EXPECT_EQ(back_to_back.Slot(kT0 + 7 * kS + 1), 7);
}

TEST(WindowScheduleTest, ToggleClosesAnOpenCaptureAndOpensNewWindows) {
  WindowSchedule s({}, kT0);
  s.Toggle(kT0 + kS);
  EXPECT_EQ(s.Slot(kT0 + kS), WindowSchedule::kClosed);
  s.Toggle(kT0 + 2 * kS);
  int64_t first = s.Slot(kT0 + 2 * kS);
  EXPECT_NE(first, WindowSchedule::kClosed);
  EXPECT_NE(first, 0) << "a new window, not the one closed";
  s.Toggle(kT0 + 3 * kS);
  s.Toggle(kT0 + 4 * kS);
  int64_t second = s.Slot(kT0 + 4 * kS);
  EXPECT_NE(second, WindowSchedule::kClosed);
  EXPECT_NE(second, first);
  WindowSchedule waiting({.start_after_s = 1000}, kT0);
  waiting.Toggle(kT0 + kS);
  EXPECT_NE(waiting.Slot(kT0 + kS), WindowSchedule::kClosed) << "SIGUSR1 opens before --start-after";
}

TEST(WindowScheduleTest, NumberedPathKeepsTheExtension) {
  EXPECT_EQ(NumberedPath("out.pftrace", 3), "out.3.pftrace");
  EXPECT_EQ(NumberedPath("d/t.et.json", 0), "d/t.et.0.json");
  EXPECT_EQ(NumberedPath("trace", 2), "trace.2");
  EXPECT_EQ(NumberedPath("a.d/trace", 1), "a.d/trace.1");
  EXPECT_EQ(NumberedPath(".hidden", 1), ".hidden.1");
}

// Usage errors: one line, exit 2, before any privilege check.
TEST(WindowCliTest, BadWindowOptionsAreUsageErrors) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--window", "0"}, {"--every", "5"}, {"--window", "2", "--every", "1"},
        {"--start-after", "-1"}, {"--window=x"}, {"--start-after", "3", "--duration", "2"},
        // windows counted in steps
        {"--steps", "0"}, {"--skip-steps", "2"}, {"--steps", "3", "--every-steps", "2"},
        {"--steps", "2", "--window", "1"}, {"--steps=x"}, {"--skip-steps", "-1"}}) {
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--", "/bin/true"});
    test::CommandResult r = test::RunCommand(argv);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("torchprobe"), std::string::npos) << r.err;
  }
}

class WindowRecordTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::MakeTempDir(); }
  void TearDown() override {
    test::WriteFile(dir_ + "/stop", "");
    for (pid_t pid : spawned_) test::Wait(pid);
  }
  // train.py looping until dir_/stop exists; returns once it is set up.
  pid_t StartTarget() {
    pid_t target = test::Spawn({test::Python(), test::TrainScript(), "--steps", "100000000", "--stop-file",
                                dir_ + "/stop", "--ready-file", dir_ + "/ready"},
                               "/dev/null");
    spawned_.push_back(target);
    EXPECT_TRUE(test::WaitForFile(dir_ + "/ready", 120));
    return target;
  }
  // Every output of one window decodes; returns its number of op nodes.
  size_t ExpectValidSet(const std::string& stem, const std::string& n) {
    std::string suffix = n.empty() ? "" : "." + n;
    size_t ops = 0, slices = 0, events = 0;  // slices: ops, annotations, steps
    bool root_last = false;
    for (const auto& row : test::JsonFacts("et", dir_ + "/" + stem + ".et" + suffix + ".json")) {
      if (row[0] != "node") continue;
      root_last = row[7] == ExecutionTraceWriter::kProcessNode && row[1] == "1";
      ops += row[7].rfind("aten::", 0) == 0;
      slices += row[7].rfind("[pytorch|profiler", 0) != 0;
    }
    EXPECT_TRUE(root_last) << stem << suffix << ": the process node (id 1) ends the ET";
    for (const auto& row : test::JsonFacts("chrome", dir_ + "/" + stem + suffix + ".json"))
      events += row[0] == "event";
    EXPECT_EQ(events, slices) << "the Kineto file has the same slices";
    std::string pf = dir_ + "/" + stem + suffix + ".pftrace";
    EXPECT_TRUE(test::FileExists(pf));
    if (!test::TraceProcessor().empty()) {
      auto rows = test::QueryTrace(pf, "select count(*) from stats where value > 0 and severity != 'info'");
      EXPECT_EQ(rows.size() == 1 ? rows[0][0] : "?", "0") << pf;
    }
    return ops;
  }
  std::vector<std::string> Outputs(const std::string& stem) {
    return {"-o", dir_ + "/" + stem + ".pftrace", "--et", dir_ + "/" + stem + ".et.json", "--chrome",
            dir_ + "/" + stem + ".json"};
  }
  std::string dir_;
  std::vector<pid_t> spawned_;
};

// Windows of 0.3 s every 2 s for 5 s: 0-0.3, 2-2.3, 4-4.3. Generous gaps, so
// a slow poll on a loaded machine moves a window's edges, never its count;
// short windows, so that writing one (~200k ops, the ET at ~4 us a slice)
// ends well before the next begins.
TEST_F(WindowRecordTest, RepeatedWindowsByTimeEachWriteAValidSet) {
  TP_REQUIRE_ROOT_AND_TORCH();
  pid_t target = StartTarget();
  std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "--pid", std::to_string(target),
                                   "--window", "0.3", "--every", "2", "--duration", "5"};
  for (const std::string& a : Outputs("w")) argv.push_back(a);
  test::CommandResult r = test::RunCommand(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* n : {"0", "1", "2"}) EXPECT_GT(ExpectValidSet("w", n), 100u) << "window " << n;
  EXPECT_FALSE(test::FileExists(dir_ + "/w.3.pftrace"));
  EXPECT_FALSE(test::FileExists(dir_ + "/w.pftrace")) << "windows are numbered";
}

// An idle target (PyTorch loaded, no op run): valid files, root nodes only.
TEST_F(WindowRecordTest, AnEmptyWindowStillWritesItsRootNodes) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string code = "import os, sys, time, torch\nopen(sys.argv[1], 'w').close()\n"
                     "while not os.path.exists(sys.argv[2]): time.sleep(0.05)\n";
  pid_t target = test::Spawn({test::Python(), "-c", code, dir_ + "/ready", dir_ + "/stop"}, "/dev/null");
  spawned_.push_back(target);
  ASSERT_TRUE(test::WaitForFile(dir_ + "/ready", 120));
  std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "--pid", std::to_string(target),
                                   "--duration", "0.5"};
  for (const std::string& a : Outputs("idle")) argv.push_back(a);
  test::CommandResult r = test::RunCommand(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ExpectValidSet("idle", ""), 0u);
}

// SIGUSR1 on, off, on, off: two windows, the first under the plain names,
// the second numbered 1. Each signal is sent once the previous one showed.
TEST_F(WindowRecordTest, SigusrOnOffTwiceGivesTwoWindows) {
  TP_REQUIRE_ROOT_AND_TORCH();
  pid_t target = StartTarget();
  std::string err = dir_ + "/tp.err";
  std::string command = "exec env TORCHPROBE_TEST_PAUSE=planned \"$0\" record --pid " +
                        std::to_string(target) + " --start-after 100000";
  for (const std::string& a : Outputs("t")) command += " " + a;
  pid_t tracer = test::Spawn({"sh", "-c", command + " 2>" + err, test::TorchprobeBinary()}, "/dev/null");
  // Paused once planned: its SIGUSR1 handler is in place.
  ASSERT_TRUE(test::WaitUntil([&] { return ReadProcessState(static_cast<uint32_t>(tracer)) == 'T'; }, 60));
  kill(tracer, SIGUSR1);
  kill(tracer, SIGCONT);
  const char* steps[] = {"capture on: window 0", "capture off: window 0 written", "capture on: window 1",
                         "capture off: window 1 written"};
  for (size_t i = 0; i < 4; ++i) {
    if (i > 0) kill(tracer, SIGUSR1);
    ASSERT_TRUE(test::WaitUntil([&] { return test::ReadFile(err).find(steps[i]) != std::string::npos; }, 60))
        << "no '" << steps[i] << "':\n" << test::ReadFile(err);
  }
  kill(tracer, SIGINT);
  EXPECT_EQ(test::Wait(tracer), 0) << test::ReadFile(err);
  // How many ops each holds depends on how fast the signals came: only
  // validity is checked.
  ExpectValidSet("t", "");
  ExpectValidSet("t", "1");
  EXPECT_FALSE(test::FileExists(dir_ + "/t.2.pftrace"));
}

// SIGINT or SIGTERM while the outputs are half written (torchprobe paused
// there, the signal pending): it finishes writing, every file is whole.
class StopWhileWritingTest : public WindowRecordTest, public ::testing::WithParamInterface<int> {};

TEST_P(StopWhileWritingTest, EveryOutputIsValid) {
  TP_REQUIRE_ROOT_AND_TORCH();
  pid_t target = StartTarget();
  std::vector<std::string> argv = {"env", "TORCHPROBE_TEST_PAUSE=writing", test::TorchprobeBinary(), "record",
                                   "-q", "--pid", std::to_string(target), "--duration", "0.3"};
  for (const std::string& a : Outputs("s")) argv.push_back(a);
  pid_t tracer = test::Spawn(argv, "/dev/null");
  ASSERT_TRUE(test::WaitUntil([&] { return ReadProcessState(static_cast<uint32_t>(tracer)) == 'T'; }, 60));
  EXPECT_FALSE(test::FileExists(dir_ + "/s.pftrace")) << "nothing appears before it is whole";
  kill(tracer, GetParam());
  kill(tracer, SIGCONT);
  EXPECT_EQ(test::Wait(tracer), 0);
  EXPECT_GT(ExpectValidSet("s", ""), 100u);
}

INSTANTIATE_TEST_SUITE_P(Signals, StopWhileWritingTest, ::testing::Values(SIGINT, SIGTERM));

}  // namespace
}  // namespace torchprobe
