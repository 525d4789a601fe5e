// `record --flight-recorder`: nothing written until asked, a stall or a death;
// then the last seconds, and a stall report that names the rank that never
// entered the collective the others wait in (issue 26).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/base/op_table.h"
#include "userspace/base/proc_maps.h"
#include "userspace/export/slice_category.h"
#include "userspace/report/json_value.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

JsonValue ReadJson(const std::string& path) {
  JsonValue value;
  std::string error;
  EXPECT_TRUE(ParseJson(test::ReadFile(path), &value, &error)) << path << ": " << error;
  return value;
}

std::string Text(const JsonValue& object, const char* key) {
  const JsonValue* value = object.Find(key);
  return value ? value->string : "";
}
uint64_t Number(const JsonValue& object, const char* key) {
  const JsonValue* value = object.Find(key);
  return value ? static_cast<uint64_t>(value->integer) : 0;
}

// `argv` with its stderr into its stdout (Spawn keeps only stdout): sh execs
// it, so the pid is its own.
std::vector<std::string> WithStderr(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"sh", "-c", "exec \"$@\" 2>&1", "sh"});
  return argv;
}

class FlightRecorderTest : public test::ScratchTest {
 protected:
  void SetUp() override {
    ScratchTest::SetUp();
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  }
  // The files in the scratch folder whose names end in `suffix`.
  std::vector<std::string> Files(const std::string& suffix) {
    std::vector<std::string> files;
    for (const std::string& name : test::ListDir(dir_))
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        files.push_back(dir_ + "/" + name);
    std::sort(files.begin(), files.end());
    return files;
  }
  // Perfetto's own reader finds no error and no data loss, and the trace
  // has slices.
  void ExpectCleanTrace(const std::string& trace) {
    DecodedTrace decoded;
    std::string error;
    ASSERT_TRUE(ReadTrace(trace, &decoded, &error)) << error;
    EXPECT_GT(decoded.slice_count(), 0u) << trace;
    if (test::TraceProcessor().empty()) return;
    auto rows = test::QueryTrace(trace, "select name, value from stats where value > 0 and severity != 'info'");
    EXPECT_TRUE(rows.empty()) << trace << ": " << (rows.empty() ? "" : rows[0][0]);
  }
  // The stall analysis of every stall report written, and checks of it.
  void ExpectRank1NamedMissing(const std::string& collective_prefix) {
    std::vector<std::string> reports = Files(".stall.json");
    ASSERT_FALSE(reports.empty()) << "no stall dump";
    for (const std::string& report : reports) {
      JsonValue json = ReadJson(report);
      EXPECT_EQ(Text(json, "reason"), "stall");
      // Written within --stall-after (3 s) + 2 s of the last step boundary.
      EXPECT_LE(Number(json, "dump_ns") - Number(json, "last_step_ns"), 5'000'000'000u) << report;
      std::string trace = Text(json, "trace");
      ExpectCleanTrace(trace);
    }
    std::vector<std::string> argv = {test::TorchprobeBinary(), "report"};
    argv.insert(argv.end(), reports.begin(), reports.end());
    test::CommandResult r = test::RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::smatch match;
    ASSERT_TRUE(std::regex_search(r.out, match, std::regex("rank 0 \\(pid [0-9]+\\) on [^ ]+ entered collective #([0-9]+) \\(" +
                                                          collective_prefix)))
        << r.out;
    std::string n = match[1];
    EXPECT_NE(r.out.find("still in"), std::string::npos) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("rank 1 \\(pid [0-9]+\\) on [^ ]+ never entered collective #" + n +
                                                    ": its last was #[0-9]+ .*its threads are in no op")))
        << r.out;
  }
};

// The line of stall_ranks.py where rank 1 sleeps instead of calling all_reduce.
int SleepLine() {
  std::string script = test::TrainScript();
  std::istringstream in(test::ReadFile(script.replace(script.rfind("train.py"), 8, "stall_ranks.py")));
  std::string line;
  for (int number = 1; std::getline(in, line); ++number)
    if (line.find("time.sleep(hold)") != std::string::npos) return number;
  return -1;
}

// Done-when 1, PyTorch 1.13: two launched Gloo ranks; rank 1 stops calling
// all_reduce at step 20 and sleeps. The light tier (the 2.6 test runs the
// full one): steps, collectives and their backend's work are enough.
TEST_F(FlightRecorderTest, AStalledRankIsNamedOnPyTorch113) {
  std::string script = test::TrainScript();
  script.replace(script.rfind("train.py"), 8, "stall_ranks.py");
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "--flight-recorder", "20", "--flight-tier", "light", "--stall-after", "3",
       "--python-stacks", "--sched", "-o", dir_ + "/f.pftrace", "--", test::Python(), script, "20", "29761", "8", "-",
       "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 1 stalls"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("flight recorder: stall dump written"), std::string::npos) << r.err;
  EXPECT_FALSE(test::FileExists(dir_ + "/f.pftrace")) << "nothing but dumps is written";
  ExpectRank1NamedMissing("c10d::allreduce_");
  // With --python-stacks and --sched, where rank 1's main thread is now: in
  // the script's time.sleep(hold) (its frame is run's, at that line), asleep
  // in clock_nanosleep.
  std::vector<std::string> argv = {test::TorchprobeBinary(), "report"};
  for (const std::string& report : Files(".stall.json")) argv.push_back(report);
  test::CommandResult analysis = test::RunCommand(argv);
  EXPECT_TRUE(std::regex_search(analysis.out, std::regex("rank 1 .*never entered.*state: asleep \\(S\\) in "
                                                         "clock_nanosleep for [0-9.]+ s")))
      << analysis.out;
  EXPECT_TRUE(std::regex_search(analysis.out, std::regex("rank 1 .*never entered.*python: [^ ]*stall_ranks.py\\(" +
                                                         std::to_string(SleepLine()) + "\\): run")))
      << analysis.out;
  // Light: no op but the collectives, their work and the steps.
  size_t marks = 0;
  for (const std::string& trace : Files(".pftrace")) {
    DecodedTrace decoded;
    std::string error;
    ASSERT_TRUE(ReadTrace(trace, &decoded, &error)) << error;
    for (const DecodedThread& thread : decoded.threads)
      for (const DecodedSlice& slice : thread.slices) {
        const std::string& name = decoded.ops[slice.op].name;
        EXPECT_TRUE(name.starts_with("c10d::") || name.starts_with("gloo:") || name.starts_with("ProfilerStep#") ||
                    decoded.ops[slice.op].category == kUserAnnotation || IsPythonFrameName(name))
            << name;
        // The step markers, as boundaries: the RecordFunction probes that
        // would time them trap at every RECORD_FUNCTION site, and stay off.
        if (decoded.ops[slice.op].category == kUserAnnotation && !name.starts_with("ProfilerStep#") &&
            !IsPythonFrameName(name)) {
          EXPECT_TRUE(name.starts_with("Optimizer.step#")) << name;
          EXPECT_EQ(slice.begin_ns, slice.end_ns) << name;
          ++marks;
        }
      }
  }
  EXPECT_GE(marks, 20u) << "the optimizer's steps of both ranks";
}

// Done-when 1, PyTorch 2.6 (its root): attached by pid to the launcher of
// both ranks before their first step.
TEST_F(FlightRecorderTest, AStalledRankIsNamedOnPyTorch26) {
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  std::string script = test::TrainScript();
  script.replace(script.rfind("train.py"), 8, "stall_ranks.py");
  std::string copy = "/tmp/torchprobe-stall-" + std::to_string(getpid()) + ".py";
  std::string ready = "/tmp/torchprobe-stall-ready-" + std::to_string(getpid());
  std::string go = "/tmp/torchprobe-stall-go-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", script, root + copy}).exit_code, 0);
  pid_t ranks = test::Spawn(test::Torch2Python(root, copy, {"20", "29763", "8", ready, go}), dir_ + "/ranks.out");
  spawned_.push_back(ranks);
  ASSERT_TRUE(test::WaitUntil([&] { return test::FileExists(root + ready + ".0") && test::FileExists(root + ready + ".1"); }, 120))
      << test::ReadFile(dir_ + "/ranks.out");
  pid_t tracer = test::Spawn(WithStderr({"env", "TORCHPROBE_TEST_PAUSE=recording", test::TorchprobeBinary(), "record",
                                          "--flight-recorder", "20", "--stall-after", "3", "--pid",
                                          std::to_string(ranks), "-o", dir_ + "/f.pftrace"}),
                             dir_ + "/tracer.out");
  ASSERT_TRUE(test::WaitUntil([&] { return ReadProcessState(static_cast<uint32_t>(tracer)) == 'T'; }, 60))
      << "torchprobe never attached";
  kill(tracer, SIGCONT);
  test::WriteFile(root + go, "");
  EXPECT_EQ(test::Wait(ranks), 0) << test::ReadFile(dir_ + "/ranks.out");
  spawned_.clear();
  EXPECT_EQ(test::Wait(tracer), 0) << test::ReadFile(dir_ + "/tracer.out");
  for (const std::string& path : {root + copy, root + ready + ".0", root + ready + ".1", root + go}) unlink(path.c_str());
  ExpectRank1NamedMissing("");  // 2.x: the Gloo backend's methods stand in for c10d's ops
}

// A dump on request (SIGUSR2) while the target runs on; the recorder goes on.
TEST_F(FlightRecorderTest, SigusrTwoDumpsTheLastSecondsAndRecordingGoesOn) {
  std::string stop = dir_ + "/stop";
  pid_t target = test::Spawn({test::Python(), "-c",
                              "import os, sys, time, torch\nx = torch.ones(8)\n"
                              "while not os.path.exists(sys.argv[1]):\n  x = torch.tanh(x); time.sleep(0.001)\n",
                              stop},
                             "/dev/null");
  spawned_.push_back(target);
  ASSERT_TRUE(test::WaitUntil([&] { return FindMappedImage(static_cast<uint32_t>(target), "libtorch_cpu.so").ok(); }, 60));
  pid_t tracer = test::Spawn(WithStderr({"env", "TORCHPROBE_TEST_PAUSE=recording", test::TorchprobeBinary(), "record",
                                          "--flight-recorder", "2", "--pid", std::to_string(target), "-o",
                                          dir_ + "/f.pftrace"}),
                             dir_ + "/tracer.out");
  ASSERT_TRUE(test::WaitUntil([&] { return ReadProcessState(static_cast<uint32_t>(tracer)) == 'T'; }, 60));
  kill(tracer, SIGCONT);
  usleep(3'500'000);  // longer than the 2 s it keeps
  kill(tracer, SIGUSR2);
  ASSERT_TRUE(test::WaitUntil([&] { return Files(".stall.json").size() == 1; }, 30)) << test::ReadFile(dir_ + "/tracer.out");
  usleep(500'000);
  kill(tracer, SIGUSR2);
  ASSERT_TRUE(test::WaitUntil([&] { return Files(".stall.json").size() == 2; }, 30)) << test::ReadFile(dir_ + "/tracer.out");
  kill(tracer, SIGINT);
  EXPECT_EQ(test::Wait(tracer), 0) << test::ReadFile(dir_ + "/tracer.out");
  EXPECT_NE(test::ReadFile(dir_ + "/tracer.out").find("wrote 2 flight recorder dumps"), std::string::npos)
      << test::ReadFile(dir_ + "/tracer.out");
  for (const std::string& report : Files(".stall.json")) {
    JsonValue json = ReadJson(report);
    EXPECT_EQ(Text(json, "reason"), "request");
    std::string trace = Text(json, "trace");
    EXPECT_NE(trace.find("-" + std::to_string(target) + "-request-"), std::string::npos) << trace;
    ExpectCleanTrace(trace);
    DecodedTrace decoded;
    std::string error;
    ASSERT_TRUE(ReadTrace(trace, &decoded, &error)) << error;
    uint64_t first = UINT64_MAX, last = 0;
    for (const DecodedThread& thread : decoded.threads)
      for (const DecodedSlice& slice : thread.slices) first = std::min(first, slice.begin_ns), last = std::max(last, slice.end_ns);
    // The trace's clock need not be the report's (CLOCK_MONOTONIC): spans only.
    uint64_t kept = Number(json, "dump_ns") - Number(json, "from_ns");
    EXPECT_LE(kept, 2'200'000'000u) << "only the last 2 s are kept";
    EXPECT_GE(kept, 1'800'000'000u) << "the last 2 s are there";
    EXPECT_GE(last - first, 1'500'000'000u) << "ops from all of the 2 s";
  }
  EXPECT_FALSE(test::FileExists(dir_ + "/f.pftrace"));
}

// Done-when 2: a target killed by a signal leaves a dump of its last seconds
// that says so; one that exits normally leaves none.
TEST_F(FlightRecorderTest, ATargetKilledByASignalIsDumped) {
  for (const char* sig : {"SIGSEGV", "SIGKILL"}) {
    for (const std::string& file : test::ListDir(dir_)) unlink((dir_ + "/" + file).c_str());
    test::CommandResult r = test::RunCommand(
        {test::TorchprobeBinary(), "record", "--flight-recorder", "5", "-o", dir_ + "/f.pftrace", "--", test::Python(),
         "-c",
         std::string("import os, signal, time, torch\nx = torch.ones(8)\nt = time.time()\n"
                     "while time.time() - t < 1.5: x = torch.tanh(x)\nos.kill(os.getpid(), signal.") + sig + ")"});
    EXPECT_EQ(r.exit_code, 128 + (std::string(sig) == "SIGSEGV" ? SIGSEGV : SIGKILL)) << r.err;
    std::vector<std::string> reports = Files(".stall.json");
    ASSERT_EQ(reports.size(), 1u) << sig << ": " << r.err;
    JsonValue json = ReadJson(reports[0]);
    EXPECT_EQ(Text(json, "reason"), "signal");
    EXPECT_NE(Text(json, "detail").find(std::string("killed by ") + sig), std::string::npos) << Text(json, "detail");
    EXPECT_NE(Text(json, "trace").find("-signal-"), std::string::npos);
    ExpectCleanTrace(Text(json, "trace"));
    const JsonValue* processes = json.Find("processes");
    ASSERT_TRUE(processes && processes->items.size() == 1);
    EXPECT_NE(Text(processes->items[0], "ended").find(std::string("killed by ") + sig), std::string::npos);
    EXPECT_NE(test::ReadFile(reports[0].substr(0, reports[0].size() - 5) + ".txt").find("killed by"), std::string::npos);
  }
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "--flight-recorder", "5", "-o",
                                            dir_ + "/g.pftrace", "--", test::Python(), "-c",
                                            "import torch; torch.ones(2).sum(); raise SystemExit(3)"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("wrote 0 flight recorder dumps"), std::string::npos) << r.err;
  for (const std::string& file : test::ListDir(dir_)) EXPECT_EQ(file.find("g."), std::string::npos) << file;
}

// Done-when 2: a target whose CPU allocator runs out of memory (a huge
// torch.empty, caught): a dump whose last slice on its thread is the
// allocating op, unwound; 1.13 and 2.6; the summary says it.
TEST_F(FlightRecorderTest, AnAllocatorOutOfMemoryErrorIsDumped) {
  const std::string code =
      "import time, torch\nx = torch.ones(8)\nt = time.time()\nwhile time.time() - t < 1: x = torch.tanh(x)\n"
      "try:\n  torch.empty(1 << 50)\nexcept RuntimeError:\n  print('caught', flush=True)\ntime.sleep(1)\n";
  std::string root = test::Torch2Root();
  std::string script = "/tmp/torchprobe-oom-" + std::to_string(getpid()) + ".py";
  std::vector<std::pair<std::string, std::vector<std::string>>> targets = {{"1.13", {test::Python(), "-c", code}}};
  if (!root.empty()) {
    test::WriteFile(root + script, code);
    targets.push_back({"2.6", test::Torch2Python(root, script, {})});
  }
  for (const auto& [version, command] : targets) {
    for (const std::string& file : test::ListDir(dir_)) unlink((dir_ + "/" + file).c_str());
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "--flight-recorder", "5", "-o", dir_ + "/f.pftrace", "--"};
    argv.insert(argv.end(), command.begin(), command.end());
    test::CommandResult r = test::RunCommand(argv);
    EXPECT_EQ(r.exit_code, 0) << version << ": " << r.err;
    EXPECT_NE(r.out.find("caught"), std::string::npos) << version << ": " << r.out;
    std::vector<std::string> reports = Files(".stall.json");
    ASSERT_EQ(reports.size(), 1u) << version << ": " << r.err;
    JsonValue json = ReadJson(reports[0]);
    EXPECT_EQ(Text(json, "reason"), "oom") << version;
    EXPECT_NE(Text(json, "detail").find("alloc_cpu.cpp"), std::string::npos) << Text(json, "detail");
    EXPECT_NE(r.err.find("1 out-of-memory error raised: pid"), std::string::npos) << version << ": " << r.err;
    std::string trace = Text(json, "trace");
    ExpectCleanTrace(trace);
    DecodedTrace decoded;
    std::string error;
    ASSERT_TRUE(ReadTrace(trace, &decoded, &error)) << error;
    const DecodedSlice* last = nullptr;
    const DecodedThread* main_thread = nullptr;
    for (const DecodedThread& thread : decoded.threads)
      if (thread.tid == thread.pid && !thread.slices.empty()) main_thread = &thread;
    ASSERT_NE(main_thread, nullptr) << version;
    for (const DecodedSlice& slice : main_thread->slices)
      if (slice.depth == 0 && (!last || slice.begin_ns >= last->begin_ns)) last = &slice;
    ASSERT_NE(last, nullptr);
    EXPECT_EQ(decoded.ops[last->op].name, "aten::empty") << version;
    EXPECT_TRUE(last->unwound) << version << ": the error ended it";
  }
  if (!root.empty()) unlink((root + script).c_str());
  if (root.empty()) GTEST_SKIP() << "1.13 only: " << test::Torch2RootMissing();
}

// Done-when 3: a busy loop through a small ring: the ring stays within its
// budget, the oldest events make room (counted), the newest are kept.
TEST_F(FlightRecorderTest, TheRingStaysWithinItsBudget) {
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "--flight-recorder", "600", "--flight-bytes", "1M", "-o",
       dir_ + "/f.pftrace", "--", test::Python(), "-c",
       "import os, signal, time, torch\nx = torch.ones(8)\nt = time.time()\n"
       "while time.time() - t < 3: x = torch.tanh(x)\nos.kill(os.getpid(), signal.SIGABRT)"});
  EXPECT_EQ(r.exit_code, 128 + SIGABRT) << r.err;
  std::vector<std::string> reports = Files(".stall.json");
  ASSERT_EQ(reports.size(), 1u) << r.err;
  JsonValue json = ReadJson(reports[0]);
  EXPECT_LE(Number(json, "ring_bytes"), 1u << 20);
  EXPECT_GT(Number(json, "ring_bytes"), 1u << 19) << "a full ring";
  EXPECT_GT(Number(json, "dropped_for_room"), 0u) << "3 s of a busy loop is more than 1 MB";
  EXPECT_LT(Number(json, "dump_ns") - Number(json, "from_ns"), 2'500'000'000u) << "the oldest made room";
  ExpectCleanTrace(Text(json, "trace"));
  EXPECT_NE(r.err.find("dropped for room"), std::string::npos) << r.err;
}

TEST(FlightRecorderCliTest, BadInputIsOneLine) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--flight-recorder", "0"},
           {"--flight-recorder", "x"},
           {"--flight-recorder", "5", "--flight-bytes", "12Q"},
           {"--flight-recorder", "5", "--flight-bytes", "1000"},
           {"--stall-after", "3"},
           {"--flight-recorder", "5", "--window", "1"},
           {"--flight-recorder", "5", "--cupti"}}) {
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--", "true"});
    test::CommandResult r = test::RunCommand(argv);
    EXPECT_EQ(r.exit_code, 2) << args[0] << " " << args[1];
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;  // the line and the --help hint
  }
}

}  // namespace
}  // namespace torchprobe
