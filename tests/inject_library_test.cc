// The injector (userspace/attach/inject_library) on its own: a library
// loaded into fixtures/inject_loop.c, which calls fake_launch in a loop,
// at fake_launch's entry; the loop's sums after it must be the uninjected
// run's, and every failure must leave the loop running untraced.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "tests/threads_let_go.h"
#include "userspace/attach/hardware_breakpoints.h"
#include "userspace/attach/inject_library.h"
#include "userspace/base/proc_maps.h"
#include "userspace/discover/remote_symbols.h"

namespace torchprobe {
namespace {

// "step N SUM" lines by N, and the final "done ..." line under -1.
std::map<long, std::string> Steps(const std::string& out) {
  std::map<long, std::string> steps;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("step ", 0) == 0) steps[std::stol(line.substr(5))] = line;
    if (line.rfind("done ", 0) == 0) steps[-1] = line;
  }
  return steps;
}

long LastStep(const std::string& out_path) {
  std::map<long, std::string> steps = Steps(test::ReadFile(out_path));
  return steps.empty() ? 0 : steps.rbegin()->first;
}

class InjectLibraryTest : public test::ScratchTest {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (ptrace of a process it did not start as a tracer)";
    if (!test::FileExists(Loop()) || !test::FileExists(Marker()))
      GTEST_SKIP() << "fixtures not built (make test)";
    ScratchTest::SetUp();
  }
  static std::string Loop() { return test::FixturePath("inject/inject_loop"); }
  static std::string Marker() { return test::FixturePath("inject/libinject_marker.so"); }

  // Starts the loop (`idle`: it never calls fake_launch) and waits until it
  // has run `steps` steps.
  pid_t StartLoop(const std::string& name, bool idle, long steps) {
    std::vector<std::string> argv = {Loop(), dir_ + "/" + name + ".stop"};
    if (idle) argv.push_back("--idle");
    pid_t pid = test::Spawn(argv, dir_ + "/" + name + ".out");
    spawned_.push_back(pid);
    EXPECT_TRUE(test::WaitUntil([&] { return LastStep(dir_ + "/" + name + ".out") >= steps; }, 60))
        << test::ReadFile(dir_ + "/" + name + ".out");
    return pid;
  }
  // Lets it run `more` steps, stops it, and returns its output's steps.
  std::map<long, std::string> StopLoop(const std::string& name, pid_t pid, long more) {
    std::string out = dir_ + "/" + name + ".out";
    long now = LastStep(out);
    EXPECT_TRUE(test::WaitUntil([&] { return LastStep(out) >= now + more; }, 60)) << test::ReadFile(out);
    test::WriteFile(dir_ + "/" + name + ".stop", "");
    EXPECT_EQ(test::Wait(pid), 0);
    std::erase(spawned_, pid);  // reaped: its pid may be another's by the end
    return Steps(test::ReadFile(out));
  }
  // An uninjected run's 60 steps.
  std::map<long, std::string> Reference(bool idle) {
    pid_t pid = StartLoop("reference", idle, 1);
    return StopLoop("reference", pid, 60);
  }
  // Every step both runs made has the same sum.
  static void ExpectSameSteps(const std::map<long, std::string>& got, const std::map<long, std::string>& want) {
    size_t compared = 0;
    for (const auto& [step, line] : got) {
      auto it = want.find(step);
      if (step < 0 || it == want.end()) continue;
      EXPECT_EQ(line, it->second);
      ++compared;
    }
    EXPECT_GE(compared, 40u);
  }
  InjectRequest Request(pid_t pid, const std::string& function, const std::string& marker) {
    StatusOr<RemoteFunction> launch = FindRemoteFunction(static_cast<uint32_t>(pid), "inject_loop", "fake_launch");
    EXPECT_TRUE(launch.ok()) << launch.status().message();
    StatusOr<DynamicLoaderCalls> calls = FindDynamicLoaderCalls(static_cast<uint32_t>(pid));
    EXPECT_TRUE(calls.ok()) << calls.status().message();
    InjectRequest request;
    request.pid = static_cast<uint32_t>(pid);
    if (calls.ok()) {
      request.dlopen = calls->dlopen;
      request.dlsym = calls->dlsym;
      request.dlerror = calls->dlerror;
      request.errno_location = calls->errno_location;
    }
    if (launch.ok()) request.safe_points = {launch->address};
    request.safe_point_what = "launch";
    request.library = Marker();
    request.function = function;
    request.argument = marker;
    request.safe_point_timeout_ns = 30'000'000'000;  // it calls fake_launch all the time (a loaded CI host)
    return request;
  }

  // The process that asks for the injection is killed (SIGKILL) while the
  // injector's helper is at `step`: the helper's observer (a test-only
  // hook) writes its pid and waits for the asker to be gone. Afterwards,
  // once the helper is gone too: no thread of the loop traced, stopped or
  // with a debug register set, and its sums those of an untraced run.
  void KillTheAskerAt(InjectStep step, bool idle) {
    std::map<long, std::string> want = Reference(idle);
    pid_t pid = StartLoop("target", idle, 3);
    std::string reached = dir_ + "/reached";
    InjectRequest request = Request(pid, "inject_marker_write", dir_ + "/marker");
    pid_t asker = fork();
    if (asker == 0) {
      uint32_t self = static_cast<uint32_t>(getpid());
      request.on_step = [&](InjectStep at) {
        if (at != step) return;
        std::string helper = std::to_string(getpid());
        int fd = open(reached.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd >= 0 && write(fd, helper.data(), helper.size()) > 0) close(fd);
        for (int i = 0; i < 60'000 && IsProcessAlive(self); ++i) usleep(1000);
      };
      InjectLibrary(request);
      _exit(0);
    }
    ASSERT_GT(asker, 0);
    ASSERT_TRUE(test::WaitUntil([&] { return !test::ReadFile(reached).empty(); }, 60)) << "the step was not reached";
    pid_t helper = static_cast<pid_t>(std::stol(test::ReadFile(reached)));
    kill(asker, SIGKILL);
    test::Wait(asker);
    // Orphaned, the helper came to us (the test binary is a subreaper).
    EXPECT_TRUE(test::WaitUntil([&] { return !IsProcessAlive(static_cast<uint32_t>(helper)); }, 60))
        << "helper " << helper << " still running";
    waitpid(helper, nullptr, WNOHANG);
    EXPECT_EQ(test::ThreadsHeld(pid), "");
    ExpectSameSteps(StopLoop("target", pid, 20), want);
  }
};

// The two steps before a breakpoint ever traps: they run on every machine
// (the loop never launches: the helper waits armed until the asker dies).
TEST_F(InjectLibraryTest, TheAskerKilledBeforeTheBreakpointsLeavesTheLoopUntouched) {
  KillTheAskerAt(InjectStep::kStopped, true);
}

TEST_F(InjectLibraryTest, TheAskerKilledWhileArmedLeavesNoBreakpointBehind) {
  KillTheAskerAt(InjectStep::kArmed, true);
}

TEST_F(InjectLibraryTest, TheAskerKilledInsideTheBorrowedCallLeavesTheLoopRunningOn) {
  if (!HardwareBreakpointsTrap().ok()) GTEST_SKIP() << HardwareBreakpointsTrap().message();
  KillTheAskerAt(InjectStep::kInCall, false);
  EXPECT_FALSE(test::FileExists(dir_ + "/marker")) << "no one waited: the library loaded, its function not called";
}

TEST_F(InjectLibraryTest, TheAskerKilledWhileReleasingLeavesTheLoopRunningOn) {
  if (!HardwareBreakpointsTrap().ok()) GTEST_SKIP() << HardwareBreakpointsTrap().message();
  KillTheAskerAt(InjectStep::kReleasing, false);
  EXPECT_NE(test::ReadFile(dir_ + "/marker"), "");
}

TEST_F(InjectLibraryTest, CallsTheFunctionAndTheLoopRunsOnUnchanged) {
  if (!HardwareBreakpointsTrap().ok()) GTEST_SKIP() << HardwareBreakpointsTrap().message();
  std::map<long, std::string> want = Reference(false);

  pid_t pid = StartLoop("target", false, 3);
  std::string marker = dir_ + "/marker";
  StatusOr<InjectResult> first = InjectLibrary(Request(pid, "inject_marker_write", marker));
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->value, 1);
  EXPECT_EQ(first->tid, static_cast<uint32_t>(pid));  // the loop's one thread
  // Again: dlopen hands back the copy loaded, which counts its calls.
  StatusOr<InjectResult> second = InjectLibrary(Request(pid, "inject_marker_write", marker));
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(second->value, 2);
  std::string p = std::to_string(pid);
  EXPECT_EQ(test::ReadFile(marker), p + " " + p + " 1.25\n" + p + " " + p + " 2.50\n");
  EXPECT_EQ(ReadTracerPid(static_cast<uint32_t>(pid)), 0u);
  kill(pid, SIGUSR1);  // its handler runs as before: signals were never taken over
  std::map<long, std::string> got = StopLoop("target", pid, 20);
  ExpectSameSteps(got, want);
  EXPECT_NE(got[-1].find(" usr1 1"), std::string::npos) << got[-1];
}

TEST_F(InjectLibraryTest, OtherThreadsRunOnUntouched) {
  if (!HardwareBreakpointsTrap().ok()) GTEST_SKIP() << HardwareBreakpointsTrap().message();
  std::map<long, std::string> want = Reference(false);
  // StartLoop's argv with --threads: a helper calling fake_launch too, a sleeper.
  pid_t pid = test::Spawn({Loop(), dir_ + "/threads.stop", "--threads"}, dir_ + "/threads.out");
  spawned_.push_back(pid);
  ASSERT_TRUE(test::WaitUntil([&] { return LastStep(dir_ + "/threads.out") >= 3; }, 60));
  ASSERT_EQ(ListThreads(static_cast<uint32_t>(pid)).size(), 3u);
  for (int i = 0; i < 6; ++i) {  // either caller may be borrowed; the others run on
    StatusOr<InjectResult> r = InjectLibrary(Request(pid, "inject_marker_write", dir_ + "/marker"));
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->value, i + 1);
  }
  for (uint32_t tid : ListThreads(static_cast<uint32_t>(pid))) EXPECT_EQ(ReadTracerPid(tid), 0u) << tid;
  // "done" is printed once both threads were joined: the sleeper woke from
  // its interrupted sleeps, the helper's sums were right all along.
  std::map<long, std::string> got = StopLoop("threads", pid, 20);
  ExpectSameSteps(got, want);
  EXPECT_NE(got[-1].find(" helper ok sleeper "), std::string::npos) << got[-1];
}

TEST_F(InjectLibraryTest, NoSafePointGivesUpAndLeavesTheLoopRunning) {
  std::map<long, std::string> want = Reference(true);

  pid_t pid = StartLoop("idle", true, 3);
  std::string marker = dir_ + "/marker";
  InjectRequest request = Request(pid, "inject_marker_write", marker);
  request.safe_point_timeout_ns = 1'000'000'000;
  StatusOr<InjectResult> r = InjectLibrary(request);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "no launch in 1 s");
  EXPECT_FALSE(test::FileExists(marker));
  EXPECT_EQ(ReadTracerPid(static_cast<uint32_t>(pid)), 0u);
  ExpectSameSteps(StopLoop("idle", pid, 20), want);
}

TEST_F(InjectLibraryTest, AFailedDlopenSaysWhyAndLeavesTheLoopAsItWas) {
  if (!HardwareBreakpointsTrap().ok()) GTEST_SKIP() << HardwareBreakpointsTrap().message();
  std::map<long, std::string> want = Reference(false);

  pid_t pid = StartLoop("target", false, 3);
  InjectRequest request = Request(pid, "inject_marker_write", dir_ + "/marker");
  request.library = dir_ + "/no-such-library.so";
  StatusOr<InjectResult> r = InjectLibrary(request);
  ASSERT_FALSE(r.ok());
  // dlerror's own words, read back from the target.
  EXPECT_NE(r.status().message().find("no-such-library.so: cannot open shared object file"), std::string::npos)
      << r.status().message();
  // A function the library lacks: found loaded, then refused.
  StatusOr<InjectResult> missing = InjectLibrary(Request(pid, "no_such_function", dir_ + "/marker"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("has no no_such_function"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(ReadTracerPid(static_cast<uint32_t>(pid)), 0u);
  ExpectSameSteps(StopLoop("target", pid, 20), want);
}

TEST(InjectLibraryUsageTest, ANonexistentProcessIsOneLine) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root";
  InjectRequest request;
  request.pid = 999999999;
  request.safe_points = {0x1000};
  StatusOr<InjectResult> r = InjectLibrary(request);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
}

}  // namespace
}  // namespace torchprobe
