// `record --pid P --inject-cupti` end to end on every machine: cupti_loop
// runs without CUDA_INJECTION64_PATH (`--until STOP`: steps until a stop
// file), torchprobe loads the collector into it at a launch of the fake
// CUDA runtime, and the fake CUPTI's records come back joined to the
// launches. The loop's numbers must be an untraced run's, it must run on
// after torchprobe, and a second run must inject into it again. On a GPU
// machine, tools/gpu-inject-check does the same with a CUDA training loop.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "tests/threads_let_go.h"
#include "userspace/attach/hardware_breakpoints.h"
#include "userspace/base/proc_maps.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

using Rows = std::vector<std::vector<std::string>>;

// cupti_loop's "step N CHECKSUM" lines by N.
std::map<long, std::string> Steps(const std::string& out) {
  std::map<long, std::string> steps;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("step ", 0) == 0) steps[std::stol(line.substr(5))] = line;
  return steps;
}

// The trace at `path`; a failure (and an empty trace) when it does not read.
DecodedTrace ReadOrFail(const std::string& path) {
  DecodedTrace trace;
  std::string error;
  if (!ReadTrace(path, &trace, &error)) ADD_FAILURE() << path << ": " << error;
  return trace;
}

class CuptiInjectTest : public test::ScratchTest {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF, ptrace)";
    if (!test::FileExists(test::FixturePath("cuda/cupti_loop")) || !test::FileExists(test::CollectorPath()))
      GTEST_SKIP() << "fixtures or the collector not built (make test)";
    ScratchTest::SetUp();
  }
  long LastStep(const std::string& name) {
    std::map<long, std::string> steps = Steps(test::ReadFile(dir_ + "/" + name + ".out"));
    return steps.empty() ? 0 : steps.rbegin()->first;
  }
  // A cupti_loop in --until mode, once it has run a few steps.
  pid_t StartLoop(const std::string& name, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {test::FixturePath("cuda/cupti_loop"), "--until", dir_ + "/" + name + ".stop"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return Started(name, argv);
  }
  // `argv` (a cupti_loop), its output in NAME.out, once it has run a few steps.
  pid_t Started(const std::string& name, const std::vector<std::string>& argv) {
    pid_t pid = test::Spawn(argv, dir_ + "/" + name + ".out");
    spawned_.push_back(pid);
    EXPECT_TRUE(test::WaitUntil([&] { return LastStep(name) >= 3; }, 60)) << test::ReadFile(dir_ + "/" + name + ".out");
    return pid;
  }
  // Waits for `steps` more steps (it runs on), then stops it (its stop
  // file: `stop`, else NAME.stop); its steps.
  std::map<long, std::string> StopLoop(const std::string& name, pid_t pid, long more, std::string stop = "") {
    long now = LastStep(name);
    EXPECT_TRUE(test::WaitUntil([&] { return LastStep(name) >= now + more; }, 60)) << name << " stopped stepping";
    test::WriteFile(stop.empty() ? dir_ + "/" + name + ".stop" : stop, "");
    EXPECT_EQ(test::Wait(pid), 0);
    std::erase(spawned_, pid);
    return Steps(test::ReadFile(dir_ + "/" + name + ".out"));
  }
  // The untraced run's lines for every step `traced` made.
  void ExpectUntracedResults(const std::map<long, std::string>& traced, const std::vector<std::string>& extra = {}) {
    ASSERT_FALSE(traced.empty());
    pid_t pid = StartLoop("untraced", extra);
    long last = traced.rbegin()->first;
    ASSERT_TRUE(test::WaitUntil([&] { return LastStep("untraced") >= last; }, 120));
    std::map<long, std::string> untraced = StopLoop("untraced", pid, 0);
    for (const auto& [step, line] : traced) EXPECT_EQ(line, untraced[step]);
  }
  // A run that cannot inject into `pid`: one line saying `why`, a CPU-side
  // trace (returned), the target let go.
  DecodedTrace CpuOnlyRun(pid_t pid, const std::string& name, const std::string& why) {
    std::string out = dir_ + "/" + name + ".pftrace";
    test::CommandResult r = Record(pid, out, 0.5);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("torchprobe: --inject-cupti: pid " + std::to_string(pid) + ": " + why +
                         ": GPU side not injected, CPU only\n"),
              std::string::npos)
        << r.err;
    DecodedTrace trace = ReadOrFail(out);
    EXPECT_EQ(trace.stats.gpu_injected, 0u);
    EXPECT_EQ(trace.stats.gpu_not_injected, 1u);
    EXPECT_TRUE(trace.gpu.empty());
    EXPECT_EQ(ReadTracerPid(static_cast<uint32_t>(pid)), 0u);
    return trace;
  }
  test::CommandResult Record(pid_t pid, const std::string& out, double seconds) {
    return test::RunCommand({test::TorchprobeBinary(), "record", "--pid", std::to_string(pid), "--inject-cupti",
                             "--duration", std::to_string(seconds), "-o", out});
  }
};

// A --pid run ends while its target lives on: what the collector lost is
// counted as it goes, not only at the target's exit.
TEST_F(CuptiInjectTest, LossesAreCountedWhileTheTargetRunsOn) {
  if (!HardwareBreakpointsTrap().ok()) GTEST_SKIP() << HardwareBreakpointsTrap().message();
  setenv("FAKE_CUPTI_DROPS", "1", 1);
  pid_t pid = StartLoop("lossy");
  unsetenv("FAKE_CUPTI_DROPS");
  std::string out = dir_ + "/lossy.pftrace";
  test::CommandResult r = Record(pid, out, 1);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = ReadOrFail(out);
  EXPECT_GT(trace.stats.gpu_activities, 0u);
  // From the injection on (not the calls before it), one a runtime call.
  EXPECT_GT(trace.stats.gpu_cupti_dropped, 0u);
  EXPECT_LE(trace.stats.gpu_cupti_dropped, trace.stats.gpu_api_calls + 200);
  test::CommandResult report = test::RunCommand({test::TorchprobeBinary(), "report", out});
  EXPECT_NE(report.out.find(std::to_string(trace.stats.gpu_cupti_dropped) + " by CUPTI"), std::string::npos)
      << report.out;
  StopLoop("lossy", pid, 1);
}

TEST_F(CuptiInjectTest, KernelsFromTheInjectionOnJoinedToTheirOpsAndTheLoopRunsOn) {
  if (!HardwareBreakpointsTrap().ok()) GTEST_SKIP() << HardwareBreakpointsTrap().message();
  pid_t pid = StartLoop("loop");
  ASSERT_EQ(test::ReadFile("/proc/" + std::to_string(pid) + "/environ").find("CUDA_INJECTION64_PATH"),
            std::string::npos);
  for (int run = 0; run < 2; ++run) {  // the second finds the collector loaded, torchprobe gone
    SCOPED_TRACE("run " + std::to_string(run));
    std::string out = dir_ + "/run" + std::to_string(run) + ".pftrace";
    test::CommandResult r = Record(pid, out, 1);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("--inject-cupti: collector loaded into pid " + std::to_string(pid)), std::string::npos)
        << r.err;
    DecodedTrace trace = ReadOrFail(out);
    EXPECT_EQ(trace.stats.gpu_injected, 1u);
    EXPECT_EQ(trace.stats.gpu_not_injected, 0u);
    EXPECT_EQ(trace.stats.gpu_processes, 1u);
    EXPECT_GT(trace.stats.gpu_activities, 100u);
    // torchprobe reads the socket from before the injection, and the
    // collector waits for room rather than drop: nothing is lost.
    EXPECT_EQ(trace.stats.gpu_unjoined, 0u);
    std::map<std::pair<std::string, std::string>, size_t> by_op;  // (activity, op) -> count
    for (const DecodedGpuActivity& g : trace.gpu)
      if (!g.op.empty()) ++by_op[{g.name, g.op}];
    std::set<std::pair<std::string, std::string>> kinds;
    for (const auto& [kind, count] : by_op) kinds.insert(kind);
    EXPECT_EQ(kinds, (std::set<std::pair<std::string, std::string>>{
                         {"gemm_kernel(float*, float const*, float const*, int)", "aten::mm"},
                         {"Memcpy HtoD (Pinned -> Device)", "aten::copy_"}}));
    if (!test::TraceProcessor().empty()) {
      EXPECT_EQ(test::QueryTrace(out, "select name from stats where value > 0 and severity in ('error', 'data_loss')"),
                Rows{});
      // Every activity has a flow from its launch and none starts before it.
      EXPECT_EQ(test::QueryTrace(out, "select count(*), sum(i.ts < o.ts) from flow f join slice o on f.slice_out = o.id "
                                      "join slice i on f.slice_in = i.id"),
                (Rows{{std::to_string(trace.gpu.size() - trace.stats.gpu_unjoined), "0"}}));
    }
    // Let go: not traced, not stopped, and stepping on.
    EXPECT_EQ(ReadTracerPid(static_cast<uint32_t>(pid)), 0u);
    long after = LastStep("loop");
    EXPECT_TRUE(test::WaitUntil([&] { return LastStep("loop") >= after + 10; }, 60));
  }
  test::CommandResult report = test::RunCommand({test::TorchprobeBinary(), "report", dir_ + "/run1.pftrace"});
  EXPECT_NE(report.out.find("--inject-cupti: collector loaded into 1 running processes"), std::string::npos)
      << report.out;
  ExpectUntracedResults(StopLoop("loop", pid, 10));
}

TEST_F(CuptiInjectTest, AProcessInAChrootGetsACopyOfTheCollectorItCanOpen) {
  if (!HardwareBreakpointsTrap().ok()) GTEST_SKIP() << HardwareBreakpointsTrap().message();
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  // cupti_loop and its fake libraries in the root, run there; it cannot
  // open torchprobe's collector by torchprobe's path.
  std::string inside = "/tmp/torchprobe-inject-" + std::to_string(getpid());
  std::string fixtures = test::FixturePath("cuda");
  struct Cleanup {
    std::string dir;
    ~Cleanup() { test::RunCommand({"rm", "-rf", dir}); }
  } cleanup{root + inside};
  ASSERT_EQ(test::RunCommand({"mkdir", "-p", root + inside}).exit_code, 0);
  for (const char* file : {"cupti_loop", "libtorch_cpu.so", "libcudart.so.13", "libcuda.so.1", "libcupti.so.13"})
    ASSERT_EQ(test::RunCommand({"cp", fixtures + "/" + file, root + inside + "/"}).exit_code, 0) << file;
  std::string command = "mount -t proc proc \"$0/proc\" && exec chroot \"$0\" \"$@\"";
  pid_t pid = Started("chroot", {"unshare", "-m", "sh", "-c", command, root, inside + "/cupti_loop", "--until",
                                 inside + "/stop"});
  test::CommandResult r = Record(pid, dir_ + "/chroot.pftrace", 1);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--inject-cupti: collector loaded into pid " + std::to_string(pid)), std::string::npos)
      << r.err;
  DecodedTrace trace = ReadOrFail(dir_ + "/chroot.pftrace");
  EXPECT_EQ(trace.stats.gpu_injected, 1u);
  EXPECT_GT(trace.stats.gpu_activities, 100u);
  // It loaded a copy in its /tmp, gone from there once loaded (the mapping stays).
  StatusOr<MappedImage> copy = FindMappedImage(static_cast<uint32_t>(pid), "libtorchprobe_cupti-");
  ASSERT_TRUE(copy.ok()) << copy.status().message();
  EXPECT_EQ(copy->path.rfind(root + "/tmp/libtorchprobe_cupti-", 0), 0u) << copy->path;  // as we see it
  for (const std::string& name : test::ListDir(root + "/tmp"))
    EXPECT_EQ(name.rfind("libtorchprobe_cupti-", 0), std::string::npos) << name;
  std::map<long, std::string> steps = StopLoop("chroot", pid, 10, root + inside + "/stop");
  EXPECT_FALSE(steps.empty());
}

TEST_F(CuptiInjectTest, AProcessThatNeverLaunchesIsTracedOnItsCpuSide) {
  pid_t pid = StartLoop("idle", {"--idle"});
  // Where breakpoints do not trap, torchprobe says so before it seizes P.
  const Status& traps = HardwareBreakpointsTrap();
  CpuOnlyRun(pid, "idle", traps.ok() ? "no CUDA launch in 3 s" : traps.message());
  ExpectUntracedResults(StopLoop("idle", pid, 10), {"--idle"});
}

// torchprobe SIGKILLed while the breakpoints wait for a launch that never
// comes (the loop is idle, and traced and running: armed): its helper gives
// up and lets go, every register cleared.
TEST_F(CuptiInjectTest, TorchprobeKilledWhileArmedLeavesNoBreakpointBehind) {
  if (!HardwareBreakpointsTrap().ok()) GTEST_SKIP() << HardwareBreakpointsTrap().message();
  pid_t pid = StartLoop("armed", {"--idle"});
  uint32_t target = static_cast<uint32_t>(pid);
  pid_t record = test::Spawn({test::TorchprobeBinary(), "record", "--pid", std::to_string(pid), "--inject-cupti",
                              "--duration", "5", "-o", dir_ + "/armed.pftrace"},
                             dir_ + "/record.out");
  spawned_.push_back(record);
  ASSERT_TRUE(test::WaitUntil([&] { return ReadTracerPid(target) != 0 && ReadProcessState(target) != 't'; }, 60))
      << "never seized and running";
  kill(record, SIGKILL);
  test::Wait(record);
  std::erase(spawned_, record);
  EXPECT_TRUE(test::WaitUntil([&] { return ReadTracerPid(target) == 0; }, 60)) << "still traced";
  EXPECT_EQ(test::ThreadsHeld(pid), "");
  ExpectUntracedResults(StopLoop("armed", pid, 10), {"--idle"});
}

TEST_F(CuptiInjectTest, AnotherCuptiSubscriberLeavesTheCpuSideOnly) {
  if (!HardwareBreakpointsTrap().ok()) GTEST_SKIP() << HardwareBreakpointsTrap().message();
  setenv("FAKE_CUPTI_BUSY", "1", 1);  // inherited by the loop: its CUPTI is taken (a profiler)
  pid_t pid = StartLoop("busy");
  unsetenv("FAKE_CUPTI_BUSY");
  DecodedTrace trace = CpuOnlyRun(pid, "busy", "another CUPTI subscriber (a profiler) owns the process");
  EXPECT_GT(trace.slice_count(), 0u);
  ExpectUntracedResults(StopLoop("busy", pid, 10));
}

TEST_F(CuptiInjectTest, AProcessWithoutCudaIsTracedOnItsCpuSide) {
  // op_storm maps the fake libtorch and no CUDA library.
  pid_t pid = test::Spawn({test::FixturePath("op_storm"), "4000000000"}, dir_ + "/storm.out");
  spawned_.push_back(pid);
  ASSERT_TRUE(test::WaitUntil([&] { return FindMappedImage(static_cast<uint32_t>(pid), "libtorch_cpu.so").ok(); }, 60));
  DecodedTrace trace = CpuOnlyRun(
      pid, "storm", "it maps no CUDA runtime or driver with a kernel launch (libcudart.so, libcuda.so)");
  EXPECT_GT(trace.slice_count(), 0u);
  EXPECT_TRUE(IsProcessAlive(static_cast<uint32_t>(pid)));
  EXPECT_NE(ReadProcessState(static_cast<uint32_t>(pid)), 'T');
}

TEST(CuptiInjectUsageTest, InjectGoesWithAPidAndCuptiWithAPidNamesIt) {
  test::CommandResult launch = test::RunCommand({test::TorchprobeBinary(), "record", "--inject-cupti", "--", "true"});
  EXPECT_EQ(launch.exit_code, 2);
  EXPECT_NE(launch.err.find("--inject-cupti goes with --pid"), std::string::npos) << launch.err;
  test::CommandResult pid = test::RunCommand({test::TorchprobeBinary(), "record", "--cupti", "--pid", "1"});
  EXPECT_EQ(pid.exit_code, 2);
  EXPECT_NE(pid.err.find("--inject-cupti loads it there"), std::string::npos) << pid.err;
}

}  // namespace
}  // namespace torchprobe
