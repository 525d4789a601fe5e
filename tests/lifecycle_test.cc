// What a new user ran into, and the harm found beside it: the per-symbol
// fallback's stop and removal, probes that must come off however torchprobe
// dies, launched commands' exit status, --wait, children by pid, duplicate
// pids, caught errors right after attaching. Needs root.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/report/trace_reader.h"
#include "userspace/session/proc_names.h"

namespace torchprobe {
namespace {

using Clock = std::chrono::steady_clock;


double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// The kernel log from now on: "leaking uprobe" lines are what a probe
// removed in a dying process leaves.
class KernelLog {
 public:
  KernelLog() {
    fd_ = open("/dev/kmsg", O_RDONLY | O_NONBLOCK);
    if (fd_ >= 0) lseek(fd_, 0, SEEK_END);
  }
  ~KernelLog() {
    if (fd_ >= 0) close(fd_);
  }
  bool readable() const { return fd_ >= 0; }
  std::string New() {
    std::string text;
    char record[8192];
    for (;;) {
      ssize_t n = read(fd_, record, sizeof(record));
      if (n < 0 && errno == EPIPE) continue;  // overwritten records: skip on
      if (n <= 0) break;
      text.append(record, static_cast<size_t>(n));
    }
    return text;
  }

 private:
  int fd_ = -1;
};

// The first byte of `symbol` of `library` as process `pid` sees it: 0xcc
// while a uprobe sits there.
int EntryByte(pid_t pid, const std::string& library, const std::string& symbol) {
  StatusOr<MappedImage> image = FindMappedImage(static_cast<uint32_t>(pid), library);
  if (!image.ok()) return -1;
  StatusOr<uint64_t> offset = FindFunctionOffset(image->host_path, symbol);
  if (!offset.ok()) return -1;
  for (const MapEntry& m : image->mappings) {
    if (*offset < m.offset || *offset >= m.offset + (m.end - m.start)) continue;
    int fd = open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY);
    unsigned char byte = 0;
    ssize_t n = pread(fd, &byte, 1, static_cast<off_t>(m.start + *offset - m.offset));
    close(fd);
    return n == 1 ? byte : -1;
  }
  return -1;
}

constexpr const char* kHotOp = "_ZN2at4_ops5op0004callEl";
constexpr const char* kColdOp = "_ZN2at4_ops5op1004callEl";

// op_spin's iterations per 100 ms, from its output, from line `from` on.
std::vector<long> Rates(const std::string& out_path, size_t from = 0) {
  std::istringstream in(test::ReadFile(out_path));
  std::string word;
  long n;
  std::vector<long> rates;
  while (in >> word >> n)
    if (word == "rate") rates.push_back(n);
  if (from >= rates.size()) return {};
  return std::vector<long>(rates.begin() + static_cast<long>(from), rates.end());
}

long Median(std::vector<long> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool WaitFor(const std::function<bool()>& done, double timeout_s) {
  auto start = Clock::now();
  while (Seconds(start) < timeout_s) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// True if `pid` descends from this test process. The test binary is a
// subreaper (test_main.cc), so a keeper whose torchprobe is gone is still ours;
// keepers of other runs on the host are not.
bool Ours(uint32_t pid) {
  for (int depth = 0; pid > 1 && depth < 64; ++depth) {
    pid = ReadParentPid(pid);
    if (pid == static_cast<uint32_t>(getpid())) return true;
  }
  return false;
}

// Live keepers of this test run (an exited one may wait as our zombie);
// not their closers (a closer is named torchprobe-drop once it runs).
std::vector<pid_t> Keepers() {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  std::vector<pid_t> pids;
  for (const std::string& name : test::ListDir("/proc")) {
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto pid = static_cast<uint32_t>(std::stoul(name));
    if (ReadProcessComm(pid) == "torchprobe-keep" && IsProcessAlive(pid) && Ours(pid) &&
        ReadProcessComm(ReadParentPid(pid)) != "torchprobe-keep")
      pids.push_back(static_cast<pid_t>(pid));
  }
  return pids;
}

class LifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    if (!test::FileExists(test::FixturePath("many/op_spin"))) GTEST_SKIP() << "fixtures not built (make test)";
    dir_ = test::MakeTempDir();
    // Orphans (a launched command whose torchprobe was killed) come to us.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  void TearDown() override {
    for (pid_t pid : spawned_) {
      kill(pid, SIGKILL);
      test::Wait(pid);
    }
    for (const std::string& name : test::ListDir(dir_)) unlink((dir_ + "/" + name).c_str());
    rmdir(dir_.c_str());
  }
  // op_spin for `seconds`, once it runs, on the 200-op libtorch ("many":
  // ~400 per-symbol probes, ~20 s to remove), the 40-op one ("some": ~4 s)
  // or the 3-op one ("few").
  pid_t Spin(double seconds, const std::string& out, const std::string& ops = "many") {
    std::string ready = dir_ + "/ready." + std::to_string(spawned_.size());
    pid_t pid = test::Spawn({test::FixturePath(ops + "/op_spin"), std::to_string(seconds), ready}, out);
    spawned_.push_back(pid);
    EXPECT_TRUE(test::WaitForFile(ready, 10));
    return pid;
  }
  DecodedTrace Read(const std::string& path) {
    DecodedTrace trace;
    std::string error;
    EXPECT_TRUE(ReadTrace(path, &trace, &error)) << error;
    return trace;
  }
  std::string dir_;
  std::vector<pid_t> spawned_;
};

// 13.1: the fallback's trace ends at --duration; torchprobe returns once the
// probes the target hits are gone (4 of 400, not the ~20 s all take); the
// unused ones stay inert until the target exits, then all come off cleanly.
TEST_F(LifecycleTest, FallbackEndsOnTimeAndRemovesWhatTheTargetHits) {
  KernelLog log;
  std::string out = dir_ + "/spin.out", trace_path = dir_ + "/fallback.pftrace";
  pid_t target = Spin(120, out);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  long untraced = Median(Rates(out));
  auto start = Clock::now();
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "--attach", "uprobe",
                                            "--pid", std::to_string(target), "--duration", "1",
                                            "-o", trace_path});
  double wall = Seconds(start);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(wall, 12.0) << "attach + 1 s + removing the 4 hot probes, not all 400";
  EXPECT_NE(r.err.find("never hit stay in place"), std::string::npos) << r.err;
  DecodedTrace trace = Read(trace_path);
  EXPECT_EQ(trace.stats.attach_mode, "uprobe");
  uint64_t first = UINT64_MAX, last = 0;
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices) first = std::min(first, s.begin_ns), last = std::max(last, s.end_ns);
  ASSERT_GT(trace.slice_count(), 100u);
  EXPECT_LT((last - first) / 1e9, 1.5) << "the recorded window ends at --duration";
  // What the loop hits is gone: it runs at its untraced speed again.
  EXPECT_NE(EntryByte(target, "libtorch_cpu.so", kHotOp), 0xcc);
  EXPECT_EQ(EntryByte(target, "libtorch_cpu.so", kColdOp), 0xcc) << "unused: left inert";
  size_t lines = Rates(out).size();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  long after = Median(Rates(out, lines));
  EXPECT_GT(after, untraced / 2) << "untraced " << untraced << "/100ms, after " << after;
  // The target exits: the keeper removes the rest and exits, no leak.
  kill(target, SIGKILL);
  EXPECT_TRUE(WaitFor([] { return Keepers().empty(); }, 60)) << "keeper still running";
  if (log.readable()) {
    EXPECT_EQ(log.New().find("leaking uprobe"), std::string::npos);
  }
}

// 14.2: torchprobe SIGKILLed while its probes are being removed: the keeper
// finishes the job in a process no one is killing.
class KilledWhileRemovingTest : public LifecycleTest,
                                public ::testing::WithParamInterface<const char*> {};

TEST_P(KilledWhileRemovingTest, LeaksNoUprobeAndTheTargetRecovers) {
  KernelLog log;
  std::string out = dir_ + "/spin.out";
  pid_t target = Spin(120, out);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  long untraced = Median(Rates(out));
  pid_t tracer = test::Spawn({"env", "TORCHPROBE_TEST_PAUSE=removing", test::TorchprobeBinary(),
                              "record", "-q", "--attach", GetParam(), "--pid", std::to_string(target),
                              "--duration", "0.5", "-o", dir_ + "/killed.pftrace"},
                             "/dev/null");
  ASSERT_TRUE(WaitFor([&] { return ReadProcessState(static_cast<uint32_t>(tracer)) == 'T'; }, 30))
      << "torchprobe never reached the removal";
  kill(tracer, SIGKILL);
  EXPECT_EQ(test::Wait(tracer), 128 + SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return EntryByte(target, "libtorch_cpu.so", kHotOp) != 0xcc; }, 20));
  size_t lines = Rates(out).size();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  long after = Median(Rates(out, lines));
  EXPECT_GT(after, untraced / 2) << "untraced " << untraced << "/100ms, after " << after;
  if (std::string(GetParam()) == "multi") {
    EXPECT_NE(EntryByte(target, "libtorch_cpu.so", kColdOp), 0xcc) << "one link: all gone";
  }
  kill(target, SIGKILL);
  EXPECT_TRUE(WaitFor([] { return Keepers().empty(); }, 60)) << "keeper still running";
  if (log.readable()) {
    std::string kernel = log.New();
    EXPECT_EQ(kernel.find("leaking uprobe"), std::string::npos) << kernel;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, KilledWhileRemovingTest, ::testing::Values("multi", "uprobe"));

// The keeper of this test's run on `target` (its command line is record's).
pid_t KeeperOf(pid_t target) {
  for (pid_t keeper : Keepers()) {
    std::string cmdline = test::ReadFile("/proc/" + std::to_string(keeper) + "/cmdline");
    if (cmdline.find(std::string("--pid\0", 6) + std::to_string(target) + '\0') != std::string::npos)
      return keeper;
  }
  return 0;
}

// What `pid`'s fds point at ("anon_inode:bpf_link", "/dev/null", ...).
std::vector<std::string> FdTargets(pid_t pid) {
  std::vector<std::string> targets;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const std::string& name : test::ListDir(dir)) {
    char link[4096];
    ssize_t n = readlink((dir + "/" + name).c_str(), link, sizeof link);
    if (n > 0) targets.emplace_back(link, static_cast<size_t>(n));
  }
  return targets;
}

bool OnlyLinksAndNull(const std::vector<std::string>& targets) {
  for (const std::string& target : targets)
    if (target != "anon_inode:bpf_link" && target != "/dev/null") return false;
  return true;
}

// Issue 22: the keeper shares record's fd table, so once record has exited
// the keeper held the caller's pipes: `$(torchprobe record ...)` or CI's
// communicate() waited for the keeper, which stays as long as the target
// with the probes it never hit. It keeps only its links now.
TEST_F(LifecycleTest, CallersPipeClosesWhenRecordExitsThoughTheKeeperStays) {
  pid_t target = Spin(120, dir_ + "/spin.out", "some");
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  std::string pid = std::to_string(target), out = dir_ + "/piped.pftrace";
  pid_t tracer = fork();
  if (tracer == 0) {
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    execl(test::TorchprobeBinary().c_str(), "torchprobe", "record", "--attach", "uprobe", "--pid",
          pid.c_str(), "--duration", "1", "-o", out.c_str(), nullptr);
    _exit(127);
  }
  close(pipe_fds[1]);
  std::string output;
  bool eof = false;
  auto start = Clock::now();
  while (!eof && Seconds(start) < 60) {  // the target runs for 120 s
    pollfd ready = {pipe_fds[0], POLLIN, 0};
    if (poll(&ready, 1, 100) <= 0) continue;
    char buffer[4096];
    ssize_t n = read(pipe_fds[0], buffer, sizeof buffer);
    if (n <= 0) eof = true;
    else output.append(buffer, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  EXPECT_EQ(test::Wait(tracer), 0) << output;
  EXPECT_TRUE(eof) << "record exited, its keeper held the pipe: " << output;
  EXPECT_NE(output.find("never hit stay in place"), std::string::npos) << output;
  pid_t keeper = KeeperOf(target);
  ASSERT_GT(keeper, 0) << "the keeper stays with the probes the target never hit";
  EXPECT_TRUE(OnlyLinksAndNull(FdTargets(keeper)));
  kill(target, SIGKILL);
  EXPECT_TRUE(WaitFor([] { return Keepers().empty(); }, 60)) << "keeper still running";
}

bool HaveCapability(int bit) {
  std::istringstream status(test::ReadFile("/proc/self/status"));
  for (std::string line; std::getline(status, line);)
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> bit) & 1;
  return false;
}

// Issue 22: record SIGKILLed while recording: its keeper removes the probes,
// and holds nothing else of record's (its output file, the temporary trace,
// BPF maps and programs, pipes, sockets): only its links, 0-2 on /dev/null.
// It also keeps out of the OOM killer's way, where it may.
TEST_F(LifecycleTest, KeeperOfAKilledRecordHoldsOnlyItsLinks) {
  pid_t target = Spin(120, dir_ + "/spin.out", "few");
  pid_t tracer = test::Spawn({test::TorchprobeBinary(), "record", "-q", "--attach", "uprobe", "--pid",
                              std::to_string(target), "-o", dir_ + "/killed.pftrace"},
                             dir_ + "/tracer.out");
  // Recording: the temporary trace is open and the probes are in.
  ASSERT_TRUE(WaitFor([&] {
    std::vector<std::string> fds = FdTargets(tracer);
    return std::count(fds.begin(), fds.end(), "anon_inode:bpf_link") >= 4 &&
           std::any_of(fds.begin(), fds.end(), [](const std::string& t) { return t.ends_with("(deleted)"); });
  }, 30)) << "record never got to recording";
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  pid_t keeper = KeeperOf(target);
  ASSERT_GT(keeper, 0);
  if (HaveCapability(24)) {  // CAP_SYS_RESOURCE: lowering oom_score_adj needs it
    EXPECT_EQ(test::ReadFile("/proc/" + std::to_string(keeper) + "/oom_score_adj"), "-1000\n");
  }
  kill(tracer, SIGKILL);
  EXPECT_EQ(test::Wait(tracer), 128 + SIGKILL);
  std::vector<std::string> fds;
  EXPECT_TRUE(WaitFor([&] {
    fds = FdTargets(keeper);
    return OnlyLinksAndNull(fds);
  }, 10)) << [&] {
    std::string held;
    for (const std::string& fd : fds)
      if (fd != "anon_inode:bpf_link") held += " " + fd;
    return "the keeper still holds" + held;
  }();
  EXPECT_GT(std::count(fds.begin(), fds.end(), "anon_inode:bpf_link"), 0) << "the unused probes stay";
  kill(target, SIGKILL);
  EXPECT_TRUE(WaitFor([] { return Keepers().empty(); }, 60)) << "keeper still running";
}

// Issue 22: once the target has exited, its per-symbol probes (80 here) go with
// no one waiting: the keeper runs at most two closers at once (each in
// uninterruptible sleep counts in the load average; it ran 16, and left
// them as zombies while it waited on one) and reaps each.
TEST_F(LifecycleTest, KeeperRemovesAnExitedTargetsProbesWithFewClosers) {
  pid_t target = Spin(120, dir_ + "/spin.out", "some");
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--attach", "uprobe",
                                            "--pid", std::to_string(target), "--duration", "0.5",
                                            "-o", dir_ + "/closers.pftrace"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  pid_t keeper = KeeperOf(target);
  ASSERT_GT(keeper, 0);
  kill(target, SIGKILL);
  test::Wait(target);
  spawned_.clear();
  std::string children = "/proc/" + std::to_string(keeper) + "/task/" + std::to_string(keeper) + "/children";
  size_t most = 0, samples_with_closers = 0;
  auto start = Clock::now();
  while (IsProcessAlive(static_cast<uint32_t>(keeper)) && Seconds(start) < 120) {
    std::istringstream list(test::ReadFile(children));
    size_t closers = 0;
    for (pid_t child; list >> child;) ++closers;
    most = std::max(most, closers);
    samples_with_closers += closers > 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(IsProcessAlive(static_cast<uint32_t>(keeper))) << "keeper still running";
  EXPECT_GT(samples_with_closers, 0u) << "no closer seen: nothing measured";
  EXPECT_LE(most, 2u) << "closers (running or unreaped) at once";
}

// 13.2
TEST_F(LifecycleTest, DuplicatePidsAreProbedOnce) {
  pid_t target = test::Spawn({test::FixturePath("op_storm"), "2000000000"}, "/dev/null");
  spawned_.push_back(target);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::string pid = std::to_string(target), out = dir_ + "/dup.pftrace";
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "-q", "--pid", pid + "," + pid, "--duration", "0.5", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = Read(out);
  EXPECT_EQ(trace.stats.probed_symbols, 2u) << "once, not once per mention";
  EXPECT_LE(trace.stats.begin_repaired + trace.stats.end_repaired, 4u);
}

// 14.1: the target exits between planning and attaching: one line, exit 1,
// no crash, nothing left.
TEST_F(LifecycleTest, TargetGoneBetweenPlanningAndAttach) {
  pid_t target = test::Spawn({test::FixturePath("op_storm"), "2000000000"}, "/dev/null");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::string out = dir_ + "/gone.pftrace", err = dir_ + "/err";
  pid_t tracer = fork();
  if (tracer == 0) {
    int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    setenv("TORCHPROBE_TEST_PAUSE", "planned", 1);
    execl(test::TorchprobeBinary().c_str(), "torchprobe", "record", "-q", "--attach", "uprobe",
          "--pid", std::to_string(target).c_str(), "-o", out.c_str(), nullptr);
    _exit(127);
  }
  ASSERT_TRUE(WaitFor([&] { return ReadProcessState(static_cast<uint32_t>(tracer)) == 'T'; }, 30));
  kill(target, SIGKILL);
  test::Wait(target);
  kill(tracer, SIGCONT);
  EXPECT_EQ(test::Wait(tracer), 1);
  std::string message = test::ReadFile(err);
  EXPECT_NE(message.find("exited before it could be attached"), std::string::npos) << message;
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 1) << message;
  EXPECT_FALSE(test::FileExists(out));
  unlink(err.c_str());
}

class LaunchTest : public LifecycleTest {
 protected:
  void SetUp() override {
    LifecycleTest::SetUp();
    if (!IsSkipped() && !test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  }
  test::CommandResult Launch(const std::string& code, const std::vector<std::string>& flags = {}) {
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "-o", dir_ + "/launch.pftrace"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", test::Python(), "-c", code});
    return test::RunCommand(argv);
  }
};

// 13.4: the command's own exit status, as `time` and `strace` give it.
TEST_F(LaunchTest, ExitsWithTheCommandsStatus) {
  // An exit status and a fatal signal (0 is every other launch test's).
  EXPECT_EQ(Launch("import torch; torch.ones(2).sum(); raise SystemExit(3)").exit_code, 3);
  EXPECT_EQ(Launch("import os, torch; torch.ones(2).sum(); os.kill(os.getpid(), 9)").exit_code,
            128 + SIGKILL);
}

// 13.4: --duration stops tracing, not the command: torchprobe waits for it.
TEST_F(LaunchTest, DurationStopsTracingAndWaitsForTheCommand) {
  // Tracing stops 6 s after the launch; the command's ops go on until 9 s
  // after its start and for at least 1 s after its import (which a cold,
  // loaded machine took over 4 s to reach).
  auto start = Clock::now();
  test::CommandResult r = Launch(
      "import time\nt = time.time()\nimport torch\nu = time.time()\n"
      "while time.time() - t < 9 or time.time() - u < 1: torch.ones(2).sum()\n"
      "print('done')\nraise SystemExit(4)",
      {"--duration", "6"});
  EXPECT_GE(Seconds(start), 9.0) << "waited for the command";
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_EQ(r.out, "done\n");
  DecodedTrace trace = Read(dir_ + "/launch.pftrace");
  uint64_t first = UINT64_MAX, last = 0;
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices) first = std::min(first, s.begin_ns), last = std::max(last, s.end_ns);
  ASSERT_GT(trace.slice_count(), 100u);
  EXPECT_LT((last - first) / 1e9, 6.0) << "tracing stopped at --duration, not at the command's end";
}

// 13.4: torchprobe killed while the command is held at a library load: the
// keeper lets it go on.
TEST_F(LaunchTest, KilledWhileTheCommandIsHeldTheCommandGoesOn) {
  std::string out = dir_ + "/held.out";
  pid_t tracer = test::Spawn({test::TorchprobeBinary(), "record", "-q", "-o", dir_ + "/held.pftrace",
                              "--", test::Python(), "-c", "import torch; print('ok')"},
                             out);
  pid_t command = 0;
  ASSERT_TRUE(WaitFor([&] {
    // torchprobe's children: its keeper and the command.
    std::istringstream children(test::ReadFile("/proc/" + std::to_string(tracer) + "/task/" +
                                               std::to_string(tracer) + "/children"));
    for (pid_t child; children >> child;)
      if (ReadProcessComm(static_cast<uint32_t>(child)) != "torchprobe-keep") command = child;
    return command > 0 && ReadProcessState(static_cast<uint32_t>(command)) == 'T';
  }, 30)) << "the command was never held at a library load";
  kill(tracer, SIGKILL);
  test::Wait(tracer);
  // Reparented to us (subreaper): it must finish by itself.
  int status = -1;
  ASSERT_TRUE(WaitFor([&] { return waitpid(command, &status, WNOHANG) == command; }, 60))
      << "the command stayed stopped";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(test::ReadFile(out), "ok\n");
  EXPECT_TRUE(WaitFor([] { return Keepers().empty(); }, 30));
}

// 13.5: --wait attaches when the process loads libtorch; without it, the
// usual one line.
TEST_F(LaunchTest, WaitAttachesWhenTorchIsLoaded) {
  std::string ready = dir_ + "/started";
  pid_t target = test::Spawn(
      {test::Python(), "-c",
       "import time; open('" + ready + "', 'w').close(); time.sleep(2)\nimport torch\n"
       "for _ in range(3000): torch.relu(torch.ones(3))\n"},
      "/dev/null");
  spawned_.push_back(target);
  ASSERT_TRUE(test::WaitForFile(ready, 10));
  test::CommandResult refused = test::RunCommand(
      {test::TorchprobeBinary(), "record", "-q", "--pid", std::to_string(target), "-o", dir_ + "/no.pftrace"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("has no libtorch_cpu.so mapped"), std::string::npos) << refused.err;
  std::string out = dir_ + "/wait.pftrace";
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "-q", "--wait", "--pid", std::to_string(target), "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = Read(out);
  size_t relu = 0;
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices) relu += trace.ops[s.op].name == "aten::relu";
  EXPECT_EQ(relu, 3000u) << "attached before the first op";
}

// 13.3: DataLoader workers of a process attached by pid, those running and
// those forked while recording; --no-children turns it off.
TEST_F(LaunchTest, FollowsChildrenByPid) {
  for (bool children : {true, false}) {
    std::string ready = dir_ + "/ready" + std::to_string(children);
    pid_t target = test::Spawn({test::Python(), test::TrainScript(), "--steps", "100000", "--workers", "2",
                                "--ready-file", ready},
                               "/dev/null");
    spawned_.push_back(target);
    ASSERT_TRUE(test::WaitForFile(ready, 60));  // written once a batch came from the workers
    std::string out = dir_ + "/children" + std::to_string(children) + ".pftrace";
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "--pid",
                                     std::to_string(target), "--duration", "2", "-o", out};
    if (!children) argv.push_back("--no-children");
    test::CommandResult r = test::RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    DecodedTrace trace = Read(out);
    std::set<uint32_t> with_ops;
    for (const DecodedThread& t : trace.threads)
      if (!t.slices.empty()) with_ops.insert(t.pid);
    if (children) {
      EXPECT_GE(with_ops.size(), 3u) << "the main process and its two workers";
      size_t named = 0;
      for (const DecodedProcess& p : trace.processes)
        named += p.name.find("(child of " + std::to_string(target) + ")") != std::string::npos;
      EXPECT_GE(named, 2u);
    } else {
      EXPECT_EQ(with_ops, std::set<uint32_t>{static_cast<uint32_t>(target)});
    }
    kill(target, SIGKILL);
    test::Wait(target);
    spawned_.pop_back();
  }
}

// 13.3: children forked while recording are attached when seen (their
// first few milliseconds are missed: the fork is seen after it happened).
TEST_F(LaunchTest, AttachesChildrenForkedWhileRecording) {
  std::string ready = dir_ + "/ready", out = dir_ + "/forks.pftrace";
  pid_t target = test::Spawn(
      {test::Python(), "-c",
       "import os, time, torch\nopen('" + ready + "', 'w').close()\ntime.sleep(2)\n"
       "for _ in range(2):\n"
       "  pid = os.fork()\n"
       "  if pid == 0:\n"
       "    t = time.time()\n"
       "    while time.time() - t < 1.5: torch.relu(torch.ones(3))\n"
       "    os._exit(0)\n"
       "  os.waitpid(pid, 0)\n"},
      "/dev/null");
  spawned_.push_back(target);
  ASSERT_TRUE(test::WaitForFile(ready, 60));
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "-q", "--pid", std::to_string(target), "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = Read(out);
  std::map<uint32_t, size_t> relu_by_pid;
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices) relu_by_pid[t.pid] += trace.ops[s.op].name == "aten::relu";
  relu_by_pid.erase(static_cast<uint32_t>(target));
  ASSERT_EQ(relu_by_pid.size(), 2u) << "two children, each traced";
  for (const auto& [pid, relu] : relu_by_pid) EXPECT_GT(relu, 1000u) << "child " << pid;
}

// 13.6: c10d collectives as torch.profiler names them: the dispatcher op on
// the calling thread, Gloo's communication on its worker thread; as many as
// were called, on each rank, whole.
void ExpectCollectives(const DecodedTrace& trace, size_t ranks, size_t at_least, bool exact) {
  std::map<std::pair<uint32_t, std::string>, size_t> on_main, on_worker;
  for (const DecodedThread& t : trace.threads) {
    for (const DecodedSlice& s : t.slices) {
      const std::string& name = trace.ops[s.op].name;
      if (name.rfind("c10d::", 0) != 0 && name.rfind("gloo:", 0) != 0) continue;
      // Launched, every one is whole; attached mid-run, those running at
      // the start or the stop are marked, and not counted.
      if (exact) {
        EXPECT_FALSE(s.repaired_end || s.repaired_begin) << name;
      }
      if (s.repaired_end || s.repaired_begin) continue;
      ++(t.tid == t.pid ? on_main : on_worker)[{t.pid, name}];
    }
  }
  std::set<uint32_t> pids;
  for (const auto& [key, n] : on_main) pids.insert(key.first);
  ASSERT_EQ(pids.size(), ranks);
  for (uint32_t pid : pids) {
    for (const char* name : {"c10d::allreduce_", "c10d::broadcast_", "c10d::allgather_", "c10d::barrier"}) {
      size_t n = on_main[{pid, name}];
      if (exact) {
        EXPECT_EQ(n, at_least) << name << " on " << pid;
      } else {
        EXPECT_GE(n, at_least) << name << " on " << pid;
      }
    }
    for (const char* name : {"gloo:all_reduce", "gloo:broadcast", "gloo:all_gather", "gloo:barrier"}) {
      size_t n = on_worker[{pid, name}];
      if (exact) {
        EXPECT_EQ(n, at_least) << name << " on a worker thread of " << pid;
      } else {
        EXPECT_GE(n, at_least) << name << " on a worker thread of " << pid;
      }
    }
  }
}

// 13.6: each all_reduce slice carries its process group (read from the
// group object the op received): rank 0 in one process, 1 in the other, a
// group of 2, one tensor (the fixture's all_reduce(x)) of 1024 floats.
void ExpectCollectiveArgs(const std::string& trace) {
  if (test::TraceProcessor().empty()) GTEST_SKIP() << "no trace_processor_shell";
  auto rows = test::QueryTrace(
      trace,
      "select distinct p.pid, a.key, a.display_value from slice s "
      "join thread_track tt on s.track_id = tt.id join thread using (utid) "
      "join process p using (upid) join args a on a.arg_set_id = s.arg_set_id "
      "where s.name = 'c10d::allreduce_' and a.key in "
      "('debug.rank', 'debug.group_size', 'debug.tensors', 'debug.bytes', 'debug.process_group')");
  std::map<std::string, std::map<std::string, std::set<std::string>>> by_pid;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 3u);
    by_pid[row[0]][row[1]].insert(row[2]);
  }
  ASSERT_EQ(by_pid.size(), 2u) << ::testing::PrintToString(rows);
  std::set<std::string> ranks;
  for (auto& [pid, args] : by_pid) {
    EXPECT_EQ(args["debug.group_size"], std::set<std::string>{"2"}) << pid;
    EXPECT_EQ(args["debug.tensors"], std::set<std::string>{"1"}) << pid;
    EXPECT_EQ(args["debug.bytes"], std::set<std::string>{"4096"}) << pid << ": 1024 floats";
    EXPECT_EQ(args["debug.process_group"].size(), 1u) << pid << ": one group";
    ASSERT_EQ(args["debug.rank"].size(), 1u) << pid;
    ranks.insert(*args["debug.rank"].begin());
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"}));
}

TEST_F(LaunchTest, CollectivesOfTwoGlooRanks) {
  std::string script = test::TrainScript();
  script.replace(script.rfind("train.py"), 8, "collectives.py");
  std::string out = dir_ + "/ranks.pftrace";
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "-q", "-o", out, "--", test::Python(), script, "25", "29731"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 0 sum 76800.0"), std::string::npos) << r.out;
  DecodedTrace trace = Read(out);
  ExpectCollectives(trace, 2, 25, true);
  ExpectCollectiveArgs(out);
}

// PyTorch 2.x exports no c10d::ops wrappers: the Gloo backend's methods stand
// in. In the trixie root (tools/torch2-root), attached by pid, rank 1 found
// as rank 0's child.
TEST_F(LifecycleTest, CollectivesOnPyTorch2) {
  test::CommandResult root = test::RunCommand({"tools/torch2-root", "--print-path"});
  std::string path = root.out.substr(0, root.out.find('\n'));
  if (test::RunCommand({"tools/torch2-root", "--check"}).exit_code != 0)
    GTEST_SKIP() << "no PyTorch 2.x root at " << path << " (tools/torch2-root builds it)";
  std::string script = test::TrainScript();
  script.replace(script.rfind("train.py"), 8, "collectives.py");
  std::string copy = path + "/tmp/torchprobe-collectives.py";
  ASSERT_EQ(test::RunCommand({"cp", script, copy}).exit_code, 0);
  pid_t ranks = test::Spawn({"unshare", "-m", "sh", "-c",
                             "mount -t proc proc \"$0/proc\" && exec chroot \"$0\" python3 "
                             "/tmp/torchprobe-collectives.py 100000 29741",
                             path},
                            "/dev/null");
  spawned_.push_back(ranks);
  // unshare, sh and chroot exec one another: the pid ends as rank 0's python.
  ASSERT_TRUE(WaitFor([&] {
    return FindMappedImage(static_cast<uint32_t>(ranks), "libgloo.so").ok() &&
           ListDescendants(static_cast<uint32_t>(ranks)).size() >= 1;
  }, 60));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::string out = dir_ + "/ranks26.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--pid",
                                            std::to_string(ranks), "--duration", "2", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = Read(out);
  ExpectCollectives(trace, 2, 5, false);
  unlink(copy.c_str());
  ExpectCollectiveArgs(out);
}

// 13.7: errors caught right after attaching end at their catch, flagged
// unwound, not repaired_end.
TEST_F(LaunchTest, CaughtErrorsRightAfterAttachingEndAtTheCatch) {
  std::string script = test::TrainScript();
  script.replace(script.rfind("train.py"), 8, "catch_errors.py");
  for (int run = 0; run < 3; ++run) {
    std::string ready = dir_ + "/ready" + std::to_string(run), out = dir_ + "/c.pftrace";
    pid_t target = test::Spawn({test::Python(), script, "100000000", ready}, "/dev/null");
    spawned_.push_back(target);
    ASSERT_TRUE(test::WaitForFile(ready, 60));
    test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--pid",
                                              std::to_string(target), "--duration", "1", "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    DecodedTrace trace = Read(out);
    size_t mm = 0, unwound = 0;
    for (const DecodedThread& t : trace.threads) {
      for (const DecodedSlice& s : t.slices) {
        if (trace.ops[s.op].name != "aten::mm") continue;
        ++mm;
        unwound += s.unwound;
      }
    }
    EXPECT_GT(mm, 10u);
    EXPECT_GE(unwound + 1, mm) << "all but one open at the stop end at their catch";
    EXPECT_EQ(trace.stats.mismatched_exits, 0u);
    kill(target, SIGKILL);
  }
}

}  // namespace
}  // namespace torchprobe

namespace torchprobe {
namespace {

// 13.10: names that tell a main process, its workers and ranks apart.
TEST(DescribeProcessTest, ScriptRankAndRole) {
  EXPECT_EQ(DescribeProcess("python3", "/usr/bin/python3 -u /x/train.py --lr 1", "", ""),
            "python3 train.py");
  EXPECT_EQ(DescribeProcess("python3", "python3 train.py", "1", "child of 4242"),
            "python3 train.py [rank 1] (child of 4242)");
  EXPECT_EQ(DescribeProcess("python3", "python3 -m torch.distributed.run x.py", "", ""),
            "python3 -m torch.distributed.run");
  EXPECT_EQ(DescribeProcess("pt_data_worker", "", "", "child of 7"), "pt_data_worker (child of 7)");
}

}  // namespace
}  // namespace torchprobe
