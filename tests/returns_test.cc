// Op returns in every --returns mode leave the target's exceptions alone:
// throw_torture (every way a C++ exception crosses traced frames) and
// PyTorch's own errors print the same traced as untraced, launched and
// attached by pid, repeatedly; its parent never sees a stop; killing
// torchprobe at any moment leaves it running to the same end.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_support.h"

namespace torchprobe {
namespace {

std::string Torture() {
  std::string binary = test::TorchprobeBinary();
  return binary.substr(0, binary.rfind('/')) + "/fixtures/throwing/throw_torture";
}

std::string Untraced(const std::string& rounds) {
  static std::string cached[8];
  static std::string cached_rounds[8];
  for (int i = 0; i < 8; ++i)
    if (cached_rounds[i] == rounds) return cached[i];
  test::CommandResult r = test::RunCommand({Torture(), rounds});
  for (int i = 0; i < 8; ++i) {
    if (cached_rounds[i].empty()) {
      cached_rounds[i] = rounds;
      cached[i] = r.out;
      break;
    }
  }
  return r.out;
}

// The numeric stats the trace carries, by name.
std::string Stat(const std::string& trace, const std::string& name) {
  auto rows = test::QueryTrace(
      trace, "select int_value from args where key = 'debug.torchprobe." + name + "'");
  return rows.empty() || rows[0].empty() ? "" : rows[0][0];
}

// Errors and data losses trace_processor found reading the trace.
std::string TraceErrors(const std::string& trace) {
  auto rows = test::QueryTrace(
      trace, "select name || '=' || value from stats where severity in ('error', 'data_loss') and value > 0");
  std::string text;
  for (const auto& row : rows) text += (row.empty() ? "" : row[0]) + " ";
  return text;
}

class ReturnsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF, ptrace)";
    dir_ = test::MakeTempDir();
  }
  void TearDown() override {
    if (!dir_.empty()) test::RunCommand({"rm", "-rf", dir_});
  }
  std::string dir_;
};

INSTANTIATE_TEST_SUITE_P(Modes, ReturnsTest, ::testing::Values("ret", "uretprobe"));

TEST_P(ReturnsTest, ThrowTortureLaunchedPrintsTheSame) {
  std::string trace = dir_ + "/t.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--returns",
                                            GetParam(), "-o", trace, "--", Torture(), "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Untraced("2"));
  if (test::TraceProcessor().empty()) return;
  EXPECT_EQ(TraceErrors(trace), "");
  EXPECT_EQ(Stat(trace, "dropped_events"), "0");
  // Every op an exception unwound ends at the catch, in both modes.
  EXPECT_NE(Stat(trace, "unwound"), "0");
  if (GetParam() == "uretprobe") {
    EXPECT_NE(Stat(trace, "throws_fixed"), "0");
    EXPECT_NE(Stat(trace, "uretprobe_processes"), "0");
  } else {
    EXPECT_EQ(Stat(trace, "throws_fixed"), "0");
  }
  // The same ops, as many times, in either mode: a thrower called on every
  // i of 300 per loop, by the main thread, four threads and the children.
  auto rows = test::QueryTrace(trace, "select count(*) from slice where name = 'aten::wrapper'");
  ASSERT_FALSE(rows.empty());
  EXPECT_GT(std::stol(rows[0][0]), 2 * 300 * 4);
}

// Attached by pid three times while it runs; meanwhile its parent (this
// test) waits for it with WUNTRACED and must never see it stop.
TEST_P(ReturnsTest, ThrowTortureAttachedRepeatedlyPrintsTheSameAndNeverStops) {
  const std::string rounds = "400";
  std::string ready = dir_ + "/ready", out = dir_ + "/out";
  pid_t target = test::Spawn({Torture(), rounds, ready}, out);
  ASSERT_TRUE(test::WaitForFile(ready, 20));
  int stops_seen = 0, status = 0, exit_code = -1;
  auto watch = [&](double seconds) {
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (exit_code < 0 && std::chrono::steady_clock::now() < until) {
      pid_t got = waitpid(target, &status, WUNTRACED | WNOHANG);
      if (got == target && WIFSTOPPED(status)) ++stops_seen;
      if (got == target && (WIFEXITED(status) || WIFSIGNALED(status)))
        exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  };
  for (int i = 0; i < 3 && exit_code < 0; ++i) {
    std::string trace = dir_ + "/p" + std::to_string(i) + ".pftrace";
    pid_t tracer = test::Spawn({test::TorchprobeBinary(), "record", "-q", "--returns", GetParam(),
                                "-p", std::to_string(target), "--duration", "0.7", "-o", trace},
                               dir_ + "/tracer.out");
    int tracer_status = 0;
    pid_t reaped = 0;
    while (exit_code < 0 && (reaped = waitpid(tracer, &tracer_status, WNOHANG)) == 0) watch(0.05);
    int tracer_exit = reaped == tracer ? (WIFEXITED(tracer_status) ? WEXITSTATUS(tracer_status) : -1)
                                       : test::Wait(tracer);
    if (exit_code < 0 && tracer_exit != 0) {
      // Only a target that ended while being attached may fail an attach.
      watch(10);
      EXPECT_GE(exit_code, 0) << "torchprobe failed on a running target: "
                              << test::ReadFile(dir_ + "/tracer.out");
    } else if (exit_code < 0 && !test::TraceProcessor().empty()) {
      EXPECT_EQ(TraceErrors(trace), "");
    }
    watch(0.2);
  }
  while (exit_code < 0) watch(1);
  EXPECT_EQ(exit_code, 0);
  EXPECT_EQ(stops_seen, 0);
  EXPECT_EQ(test::ReadFile(out), Untraced(rounds));
}

// SIGKILL at any moment: while attaching, recording, or with threads
// stopped for a fix; the keeper finishes the job and the target its run.
TEST_P(ReturnsTest, KillingTorchprobeLeavesTheTargetToTheSameEnd) {
  const std::string rounds = "300";
  std::string ready = dir_ + "/ready", out = dir_ + "/out";
  pid_t target = test::Spawn({Torture(), rounds, ready}, out);
  ASSERT_TRUE(test::WaitForFile(ready, 20));
  for (int delay_ms : {5, 60, 300, 700}) {
    pid_t tracer = test::Spawn({test::TorchprobeBinary(), "record", "-q", "--returns", GetParam(),
                                "-p", std::to_string(target), "-o", dir_ + "/k.pftrace"},
                               dir_ + "/tracer.out");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(tracer, SIGKILL);
    test::Wait(tracer);
    if (waitpid(target, nullptr, WNOHANG) != 0) break;  // done already
  }
  EXPECT_EQ(test::Wait(target), 0);
  EXPECT_EQ(test::ReadFile(out), Untraced(rounds));
}

// PyTorch's own errors: c10::Error out of at::_ops::mm::call, caught by the
// Python binding, in both modes.
TEST_P(ReturnsTest, PyTorchErrorsPrintTheSame) {
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  std::string script = "tests/fixtures/torch_errors.py";
  test::CommandResult untraced = test::RunCommand({test::Python(), script});
  ASSERT_EQ(untraced.exit_code, 0) << untraced.err;
  std::string trace = dir_ + "/torch.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--returns",
                                            GetParam(), "-o", trace, "--", test::Python(), script});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, untraced.out);
  if (!test::TraceProcessor().empty()) {
    EXPECT_EQ(TraceErrors(trace), "");
  }
}

// Another run's uretprobes on the same libtorch (here on another process)
// hijack the return addresses of a `ret`-route target too: the kernel shares
// one uprobe per function among its users. The guard, on every target that
// can have it, gives them back before an exception walks the stack; without
// it the first caught op error ended the target in std::terminate.
TEST(ReturnsGuardTest, RetRouteTargetSurvivesAnotherRunsUretprobes) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  std::string script = "tests/fixtures/torch_errors.py";
  test::CommandResult untraced = test::RunCommand({test::Python(), script});
  ASSERT_EQ(untraced.exit_code, 0) << untraced.err;
  std::string dir = test::MakeTempDir(), ready = dir + "/ready", stop = dir + "/stop";
  pid_t other = test::Spawn({test::Python(), test::TrainScript(), "--steps", "10000000", "--ready-file", ready,
                             "--stop-file", stop},
                            dir + "/other.out");
  ASSERT_TRUE(test::WaitForFile(ready, 60));
  pid_t tracer = test::Spawn({test::TorchprobeBinary(), "record", "-q", "--returns", "uretprobe", "-p",
                              std::to_string(other), "-o", dir + "/other.pftrace"},
                             dir + "/tracer.out");
  // The other process has hit the other run's probes: its uretprobes are live.
  bool live = false;
  for (int i = 0; i < 3000 && !live; ++i) {
    live = test::ReadFile("/proc/" + std::to_string(other) + "/maps").find("[uprobes]") != std::string::npos;
    if (!live) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(live) << "the uretprobe run never reached its target";
  std::string trace = dir + "/ret.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--returns", "ret",
                                            "-o", trace, "--", test::Python(), script});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, untraced.out);
  if (r.exit_code == 0 && !test::TraceProcessor().empty()) {
    EXPECT_EQ(TraceErrors(trace), "");
  }
  kill(tracer, SIGINT);
  EXPECT_EQ(test::Wait(tracer), 0);
  test::WriteFile(stop, "");
  EXPECT_EQ(test::Wait(other), 0);
  for (const std::string& name : test::ListDir(dir)) unlink((dir + "/" + name).c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace torchprobe
