// Forked children traced from their first op: a child of a traced process
// is held stopped at its fork (BPF, before its first instruction) until its
// links are live, launched or attached by pid; DataLoader workers that start
// a new set every epoch lose no batch. Without the hold (--no-hold-children,
// or a kernel before 6.13) what a child ran before it was attached is
// counted and said.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"
#include "userspace/report/report.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

// Slices named `op` per process.
std::map<uint32_t, size_t> CountByProcess(const DecodedTrace& trace, const std::string& op) {
  std::map<uint32_t, size_t> count;
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices)
      if (trace.ops[s.op].name == op) ++count[t.pid];
  return count;
}

// "KEY PID N" lines of a fixture's output, by PID.
std::map<uint32_t, size_t> Printed(const std::string& text, const std::string& key) {
  std::map<uint32_t, size_t> printed;
  std::istringstream lines(text);
  for (std::string word; lines >> word;) {
    if (word != key) continue;
    uint32_t pid = 0;
    size_t n = 1;
    lines >> pid;
    if (key == "batches") lines >> n;
    printed[pid] = n;
  }
  return printed;
}

DecodedTrace Read(const std::string& path) {
  DecodedTrace trace;
  std::string error;
  EXPECT_TRUE(ReadTrace(path, &trace, &error)) << error;
  return trace;
}

std::string Report(const DecodedTrace& trace) {
  std::ostringstream out;
  PrintReport(trace, out);
  return out.str();
}

class ChildrenTest : public test::ScratchTest {
 protected:
  // `argv` launched under `record` with `options`; its stdout and the trace.
  test::CommandResult Launch(const std::vector<std::string>& options, const std::vector<std::string>& argv,
                             DecodedTrace* trace) {
    std::string out = dir_ + "/children.pftrace";
    std::vector<std::string> command = {test::TorchprobeBinary(), "record", "-o", out};
    command.insert(command.end(), options.begin(), options.end());
    command.push_back("--");
    command.insert(command.end(), argv.begin(), argv.end());
    test::CommandResult r = test::RunCommand(command);
    if (r.exit_code == 0) *trace = Read(out);
    return r;
  }
};

// Each os.fork() child adds 20 times from its first moment and exits: all
// of them, each of its adds, held at its fork and said so.
TEST_F(ChildrenTest, LaunchedForkedChildrenAreTracedFromTheirFirstOp) {
  TP_REQUIRE_ROOT_AND_TORCH();
  DecodedTrace trace;
  test::CommandResult r =
      Launch({}, {test::Python(), test::Fixture("forks.py"), "--children", "3", "--ops", "20"}, &trace);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<uint32_t, size_t> children = Printed(r.out, "child");
  ASSERT_EQ(children.size(), 3u) << r.out;
  std::map<uint32_t, size_t> adds = CountByProcess(trace, "aten::add");
  for (const auto& [pid, one] : children) EXPECT_EQ(adds[pid], 20u) << "child " << pid;
  EXPECT_EQ(trace.stats.children_held, 3u);
  EXPECT_EQ(trace.stats.children_untraced, 0u);
  EXPECT_NE(r.err.find("3 forked children held at their fork until attached"), std::string::npos) << r.err;
  EXPECT_NE(Report(trace).find("3 forked children held stopped at their fork"), std::string::npos);
}

// Not held: each child is attached only once seen, its first moments are
// missed, and that is counted, in the summary, the report and its name.
TEST_F(ChildrenTest, WithoutTheHoldTheMissedStartIsCountedAndSaid) {
  TP_REQUIRE_ROOT_AND_TORCH();
  DecodedTrace trace;
  test::CommandResult r = Launch({"--no-hold-children"},
                                 {test::Python(), test::Fixture("forks.py"), "--children", "2", "--ops", "20"},
                                 &trace);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(trace.stats.children_held, 0u);
  // A child gone before it was attached is not counted: it was never traced.
  // One attached after its last op (while Python shut down) is counted but
  // shows no slice: every child with slices is counted, no more than ran.
  size_t attached = 0;
  for (const DecodedProcess& p : trace.processes) attached += p.name.find(" after its fork)") != std::string::npos;
  EXPECT_GE(trace.stats.children_untraced, attached);
  EXPECT_LE(trace.stats.children_untraced, 2u);
  if (attached > 0) {
    EXPECT_GT(trace.stats.children_untraced_ns, 0u);
    EXPECT_NE(r.err.find("traced only once attached"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("(--no-hold-children)"), std::string::npos) << r.err;
    EXPECT_NE(Report(trace).find("traced only once attached"), std::string::npos);
  }
}

// A child that is not held at its fork (dash and Python's subprocess vfork
// then exec) is held at its exec and its loads until its own libtorch is
// attached, even after another process of the tree attached its own: the
// second op_storm (vfork'd) loses none of its first ops.
TEST_F(ChildrenTest, AVforkedChildIsTracedFromItsFirstOpAfterAnotherAttached) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  DecodedTrace trace;
  test::CommandResult r = Launch({}, {"sh", "-c", "(\"$0\" 100 &); sleep 0.5; \"$0\" 1000; echo $$ done",
                                      test::FixturePath("op_storm")}, &trace);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::multiset<size_t> adds;
  for (const auto& [pid, n] : CountByProcess(trace, "aten::add")) adds.insert(n);
  EXPECT_EQ(adds, (std::multiset<size_t>{100, 1000})) << r.err;
  EXPECT_EQ(trace.stats.children_untraced, 0u) << r.err;
  EXPECT_EQ(r.err.find("traced only once attached"), std::string::npos) << r.err;
}

// DataLoader workers, new ones every epoch (not persistent): every batch of
// every worker is in the trace (one aten::stack each).
void ExpectEveryWorkersBatches(const test::CommandResult& r, const DecodedTrace& trace, size_t workers) {
  std::map<uint32_t, size_t> batches = Printed(r.out, "batches");
  ASSERT_EQ(batches.size(), workers) << r.out;
  std::map<uint32_t, size_t> stacks = CountByProcess(trace, "aten::stack");
  for (const auto& [pid, n] : batches) EXPECT_EQ(stacks[pid], n) << "worker " << pid;
  EXPECT_EQ(trace.stats.children_untraced, 0u);
}

TEST_F(ChildrenTest, EveryBatchOfEveryEpochsWorkersOnPyTorch113) {
  TP_REQUIRE_ROOT_AND_TORCH();
  DecodedTrace trace;
  test::CommandResult r = Launch(
      {}, {test::Python(), test::Fixture("workers.py"), "--epochs", "3", "--batches", "8", "--workers", "2"},
      &trace);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectEveryWorkersBatches(r, trace, 6);
}

TEST_F(ChildrenTest, EveryBatchOfEveryEpochsWorkersOnPyTorch26) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  std::string script = "/tmp/torchprobe-workers-" + std::to_string(getpid()) + ".py";
  ASSERT_EQ(test::RunCommand({"cp", test::Fixture("workers.py"), root + script}).exit_code, 0);
  DecodedTrace trace;
  test::CommandResult r =
      Launch({}, test::Torch2Python(root, script, {"--epochs", "3", "--batches", "8", "--workers", "2"}), &trace);
  unlink((root + script).c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectEveryWorkersBatches(r, trace, 6);
}

// Attached by pid before the children exist: the same, from their first op.
TEST_F(ChildrenTest, AttachedByPidChildrenAreTracedFromTheirFirstOp) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string go = dir_ + "/go", out = dir_ + "/forks.out", trace_path = dir_ + "/pid.pftrace";
  pid_t target = test::Spawn(
      {test::Python(), test::Fixture("forks.py"), "--children", "3", "--ops", "20", "--go-file", go}, out);
  spawned_.push_back(target);
  // Attached once it has imported torch (a cold, loaded machine takes seconds).
  ASSERT_TRUE(test::WaitUntil([&] { return FindMappedImage(static_cast<uint32_t>(target), "libtorch_cpu.so").ok(); }, 120))
      << test::ReadFile(out);
  pid_t tracer = test::Spawn({test::TorchprobeBinary(), "record", "-q", "--pid", std::to_string(target), "-o",
                              trace_path},
                             "/dev/null");
  spawned_.push_back(tracer);
  // The target's ops trap once the probes are live: the kernel then maps
  // its [uprobes] page. Its children come after that.
  ASSERT_TRUE(test::WaitUntil(
      [&] { return test::ReadFile("/proc/" + std::to_string(target) + "/maps").find("[uprobes]") != std::string::npos; },
      120))
      << "the probes never went live";
  test::WriteFile(go, "");
  EXPECT_EQ(test::Wait(target), 0);
  spawned_.erase(spawned_.begin());
  EXPECT_EQ(test::Wait(tracer), 0) << "record stops when its target exits";
  spawned_.clear();
  std::map<uint32_t, size_t> children = Printed(test::ReadFile(out), "child");
  ASSERT_EQ(children.size(), 3u) << test::ReadFile(out);
  DecodedTrace trace = Read(trace_path);
  std::map<uint32_t, size_t> adds = CountByProcess(trace, "aten::add");
  for (const auto& [pid, one] : children) EXPECT_EQ(adds[pid], 20u) << "child " << pid;
  EXPECT_EQ(trace.stats.children_held, 3u);
}

}  // namespace
}  // namespace torchprobe
