// torchprobe against a real PyTorch (Debian's python3-torch): what it
// records agrees with torch.profiler, and the traced program is unharmed.
// Needs root (BPF); skips cleanly otherwise.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "tests/test_support.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

using test::Python;
using test::RunCommand;
using test::TorchprobeBinary;
using test::TrainScript;

using Counts = std::map<std::string, double>;

struct OpCounts {
  Counts by_name;    // aten op name -> calls
  Counts by_parent;  // "name <- parent aten op" -> calls
};

// What train.py --profile wrote: "op NAME" per op torch.profiler recorded,
// "parent NAME CALLER" per op of PyTorch's execution graph ("-": no caller).
OpCounts ParseProfile(const std::string& text) {
  OpCounts counts;
  std::istringstream in(text);
  std::string kind, name, caller;
  while (in >> kind >> name) {
    if (kind == "op") {
      counts.by_name[name] += 1;
    } else if (kind == "parent" && in >> caller) {
      counts.by_parent[name + " <- " + (caller == "-" ? "" : caller)] += 1;
    }
  }
  return counts;
}

OpCounts CountTrace(const DecodedTrace& trace) {
  OpCounts counts;
  for (const DecodedThread& thread : trace.threads) {
    for (const DecodedSlice& slice : thread.slices) {
      // Ops only (train.py's optimizer opens annotations), each with its
      // nearest op caller, as the profiler's op lines and parents give them.
      if (!trace.ops[slice.op].category.empty()) continue;
      const std::string& name = trace.ops[slice.op].name;
      int32_t caller = slice.parent;
      while (caller >= 0 && !trace.ops[thread.slices[caller].op].category.empty())
        caller = thread.slices[caller].parent;
      std::string parent = caller >= 0 ? trace.ops[thread.slices[caller].op].name : "";
      counts.by_name[name] += 1;
      counts.by_parent[name + " <- " + parent] += 1;
    }
  }
  return counts;
}

Counts Difference(const Counts& longer, const Counts& shorter) {
  Counts diff = longer;
  for (const auto& [key, n] : shorter) diff[key] -= n;
  return diff;
}

struct Agreement {
  double recall = 0, precision = 0, expected = 0;
};

// Recall and precision of `got` against `want`, over per-key counts.
Agreement Compare(const Counts& got, const Counts& want) {
  double matched = 0, total_got = 0, total_want = 0;
  std::set<std::string> keys;
  for (const auto& [k, n] : got) keys.insert(k);
  for (const auto& [k, n] : want) keys.insert(k);
  for (const std::string& k : keys) {
    double g = std::max(0.0, got.count(k) ? got.at(k) : 0.0);
    double w = std::max(0.0, want.count(k) ? want.at(k) : 0.0);
    matched += std::min(g, w);
    total_got += g;
    total_want += w;
  }
  return {total_want ? matched / total_want : 0, total_got ? matched / total_got : 0, total_want};
}

std::string Disagreements(const Counts& got, const Counts& want) {
  return test::CountDisagreements(got, want);
}

DecodedTrace Record(const std::vector<std::string>& target, const std::string& out,
                    std::string* result_line = nullptr) {
  std::vector<std::string> argv = {TorchprobeBinary(), "record", "-q", "-o", out, "--"};
  argv.insert(argv.end(), target.begin(), target.end());
  test::CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (result_line) *result_line = r.out;
  DecodedTrace trace;
  std::string error;
  EXPECT_TRUE(ReadTrace(out, &trace, &error)) << error;
  return trace;
}

// Perfetto's own parser reads the trace with no errors or data losses and
// sees every slice finished (ops and annotations; the stats instant is not
// one).
void ExpectPerfettoReadsCleanly(const std::string& trace, size_t expected_slices) {
  if (test::TraceProcessor().empty()) return;
  auto bad = test::QueryTrace(trace,
                              "select name || ':' || coalesce(idx, '') || '=' || value from stats where value > 0 "
                              "and (severity = 'error' or severity = 'data_loss')");
  EXPECT_TRUE(bad.empty()) << "trace_processor stats: " << ::testing::PrintToString(bad);
  auto counts = test::QueryTrace(
      trace, "select count(*), sum(dur < 0) from slice where category != 'torchprobe'");
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0], (std::vector<std::string>{std::to_string(expected_slices), "0"}));
}

class RecordTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::MakeTempDir(); }
  void TearDown() override {
    for (const std::string& name : test::ListDir(dir_)) unlink((dir_ + "/" + name).c_str());
    rmdir(dir_.c_str());
  }
  // Starts train.py looping until StopTarget: however slow an attach is on a
  // loaded machine, the target is still running when it ends.
  pid_t SpawnLongTarget() {
    std::string ready = dir_ + "/ready";
    pid_t target = test::Spawn({Python(), TrainScript(), "--steps", "10000000", "--ready-file", ready,
                                "--stop-file", dir_ + "/stop"},
                               dir_ + "/target.out");
    EXPECT_TRUE(test::WaitForFile(ready, 60));
    return target;
  }
  // Ends the loop, waits for the target, and checks that what it printed is
  // what an untraced run of as many steps prints: tracing changed no bit.
  void StopTargetAndExpectUntracedResult(pid_t target) {
    test::WriteFile(dir_ + "/stop", "");
    EXPECT_EQ(test::Wait(target), 0);
    std::string printed = test::ReadFile(dir_ + "/target.out");
    ASSERT_EQ(printed.rfind("steps ", 0), 0u) << printed;
    std::string steps = printed.substr(6, printed.find('\n') - 6);
    std::string untraced = RunCommand({Python(), TrainScript(), "--steps", steps}).out;
    ASSERT_EQ(untraced.rfind("result ", 0), 0u) << untraced;
    EXPECT_EQ(printed, "steps " + steps + "\n" + untraced);
  }
  std::string dir_;
};

TEST_F(RecordTest, OpCountsAndNestingMatchTorchProfiler) {
  TP_REQUIRE_ROOT_AND_TORCH();
  const int kShort = 10, kLong = 40;
  OpCounts traced[2], profiled[2];
  int steps[2] = {kShort, kLong};
  for (int i = 0; i < 2; ++i) {
    std::string n = std::to_string(steps[i]);
    DecodedTrace trace = Record({Python(), TrainScript(), "--steps", n}, dir_ + "/t" + n + ".pftrace");
    ASSERT_TRUE(trace.has_stats);
    ASSERT_FALSE(trace.processes.empty());
    // Named while it ran, though the trace is written after it exited.
    EXPECT_NE(trace.processes[0].cmdline.find("train.py --steps"), std::string::npos);
    EXPECT_EQ(trace.stats.dropped_events, 0u);
    EXPECT_EQ(trace.stats.unresolved_symbols, 0u);
    EXPECT_EQ(trace.unterminated, 0u);
    // Launched: held until attached, so every op is seen whole and every
    // return matches its entry's frame.
    EXPECT_EQ(trace.stats.begin_repaired + trace.stats.end_repaired, 0u);
    EXPECT_EQ(trace.stats.mismatched_exits, 0u);
    traced[i] = CountTrace(trace);
    if (i == 1) ExpectPerfettoReadsCleanly(dir_ + "/t" + n + ".pftrace", trace.slice_count());
    std::string json = dir_ + "/p" + n + ".txt";
    ASSERT_EQ(RunCommand({Python(), TrainScript(), "--steps", n, "--profile", json}).exit_code, 0);
    profiled[i] = ParseProfile(test::ReadFile(json));
  }
  Counts got = Difference(traced[1].by_name, traced[0].by_name);
  Counts want = Difference(profiled[1].by_name, profiled[0].by_name);
  Agreement names = Compare(got, want);
  EXPECT_GT(names.expected, 100.0 * (kLong - kShort)) << "too few ops to compare";
  EXPECT_GE(names.recall, 0.99) << Disagreements(got, want);
  EXPECT_GE(names.precision, 0.99) << Disagreements(got, want);
  // Nesting: for ops both sides see, the same parent aten op as PyTorch's
  // own call-stack record (its execution graph observer).
  Counts got_parents, want_parents;
  Counts got_p = Difference(traced[1].by_parent, traced[0].by_parent);
  Counts want_p = Difference(profiled[1].by_parent, profiled[0].by_parent);
  for (auto& [key, n] : got_p)
    if (want.count(key.substr(0, key.find(" <- ")))) got_parents[key] = n;
  for (auto& [key, n] : want_p)
    if (got.count(key.substr(0, key.find(" <- ")))) want_parents[key] = n;
  Agreement parents = Compare(got_parents, want_parents);
  EXPECT_GE(parents.recall, 0.99) << Disagreements(got_parents, want_parents);
  EXPECT_GE(parents.precision, 0.99) << Disagreements(got_parents, want_parents);
  std::printf("[ parity ] ops/step %.1f: recall %.4f precision %.4f; parents recall %.4f precision %.4f\n",
              names.expected / (kLong - kShort), names.recall, names.precision, parents.recall,
              parents.precision);
}

TEST_F(RecordTest, AttachToRunningProcessLeavesResultBitIdentical) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/attach.pftrace";
  pid_t target = SpawnLongTarget();
  test::CommandResult r = RunCommand({TorchprobeBinary(), "record", "-q", "--pid",
                                      std::to_string(target), "--duration", "1.5", "-o", out});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  StopTargetAndExpectUntracedResult(target);

  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  ASSERT_EQ(trace.processes.size(), 1u);
  EXPECT_EQ(trace.processes[0].pid, static_cast<uint32_t>(target));
  EXPECT_NE(trace.processes[0].cmdline.find("train.py"), std::string::npos);
  const DecodedThread* main_thread = trace.FindThread(target, target);
  ASSERT_NE(main_thread, nullptr);
  EXPECT_GT(main_thread->slices.size(), 1000u);
  EXPECT_EQ(trace.stats.attach_mode, "uprobe_multi");
  // 2952 ATen ops less the 6 the profiler never records, 11 c10d
  // collectives, 13 copies of Dispatcher::callBoxed, autograd's engine and
  // its 604 node classes' apply in libtorch, 11 collectives in libgloo,
  // PyNode::apply in libtorch_python (Python Functions' nodes).
  EXPECT_EQ(trace.stats.probed_symbols, 2952u - 6u + 11u + 13u + 1u + 604u + 11u + 1u);
  // Attached mid-loop: what was running is repaired and marked, never dropped;
  // only ops open at the start or stop are, a few per thread, not the ops
  // that ran while the probes were being attached or removed.
  EXPECT_LE(trace.stats.begin_repaired, 16u);
  EXPECT_LE(trace.stats.end_repaired, 16u);
  size_t marked = 0;
  for (const DecodedSlice& s : main_thread->slices) marked += s.repaired_begin + s.repaired_end;
  EXPECT_EQ(marked, trace.stats.begin_repaired + trace.stats.end_repaired);
  ExpectPerfettoReadsCleanly(out, trace.slice_count());
}

TEST_F(RecordTest, SigkilledTracerLeavesTargetRunningAndNoFile) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/killed.pftrace";
  pid_t target = SpawnLongTarget();
  pid_t tracer = test::Spawn({TorchprobeBinary(), "record", "-q", "--pid", std::to_string(target),
                              "-o", out},
                             "/dev/null");
  usleep(1500 * 1000);
  kill(tracer, SIGKILL);
  EXPECT_EQ(test::Wait(tracer), 128 + SIGKILL);
  StopTargetAndExpectUntracedResult(target);
  EXPECT_FALSE(test::FileExists(out));
}

TEST_F(RecordTest, CaughtOpErrorsLeaveTargetRunningAndAreClosedAtTheCatch) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/catch.pftrace", printed;
  std::string script = TrainScript();
  script.replace(script.rfind("train.py"), 8, "catch_errors.py");
  DecodedTrace trace = Record({Python(), script, "50"}, out, &printed);
  EXPECT_EQ(printed, "caught 50\n");
  EXPECT_GE(trace.stats.catch_probes, 1u);
  EXPECT_EQ(trace.stats.unwound, 100u) << "aten::matmul and aten::mm, 50 times";
  size_t unwound_mm = 0, add = 0;
  for (const DecodedThread& t : trace.threads) {
    for (const DecodedSlice& s : t.slices) {
      const std::string& name = trace.ops[s.op].name;
      add += name == "aten::add";
      EXPECT_FALSE(s.repaired_end) << "an unwound op is not a repair";
      if (name != "aten::mm" || !s.unwound) continue;
      ++unwound_mm;
      ASSERT_GE(s.parent, 0);
      EXPECT_EQ(trace.ops[t.slices[s.parent].op].name, "aten::matmul");
      EXPECT_TRUE(t.slices[s.parent].unwound);
    }
  }
  EXPECT_EQ(unwound_mm, 50u);
  EXPECT_GE(add, 50u) << "ops after each catch are seen whole";
  ExpectPerfettoReadsCleanly(out, trace.slice_count());
}

TEST_F(RecordTest, ConcurrentThreadsEachGetTheirOwnTrack) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/threads.pftrace", printed;
  std::string script = TrainScript();
  script.replace(script.rfind("train.py"), 8, "threads.py");
  DecodedTrace trace = Record({Python(), script}, out, &printed);
  EXPECT_EQ(printed, "done\n");
  std::map<uint32_t, size_t> relu_by_thread;
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices) relu_by_thread[t.tid] += trace.ops[s.op].name == "aten::relu";
  ASSERT_EQ(relu_by_thread.size(), 4u);
  for (const auto& [tid, relus] : relu_by_thread) EXPECT_EQ(relus, 300u) << "thread " << tid;
  EXPECT_EQ(trace.stats.begin_repaired + trace.stats.end_repaired, 0u);
  ExpectPerfettoReadsCleanly(out, trace.slice_count());
}

TEST_F(RecordTest, FollowsForkedDataLoaderWorkers) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/workers.pftrace";
  DecodedTrace trace = Record({Python(), TrainScript(), "--steps", "200", "--workers", "2"}, out);
  std::set<uint32_t> pids_with_ops;
  std::map<std::string, size_t> worker_ops;
  uint32_t main_pid = trace.processes.empty() ? 0 : trace.processes[0].pid;
  for (const DecodedThread& t : trace.threads) {
    if (!t.slices.empty()) pids_with_ops.insert(t.pid);
    if (t.pid != main_pid)
      for (const DecodedSlice& s : t.slices) worker_ops[trace.ops[s.op].name]++;
  }
  EXPECT_GE(pids_with_ops.size(), 3u) << "main process and two workers";
  EXPECT_GT(worker_ops["aten::stack"], 0u) << "workers collate batches";
  ExpectPerfettoReadsCleanly(out, trace.slice_count());
}

}  // namespace
}  // namespace torchprobe
