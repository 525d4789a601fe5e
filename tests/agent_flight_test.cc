// agent --flight-recorder: a record per target keeping its last seconds,
// dumps indexed as windows are, `trigger --dump` (issue 26).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "tests/agent_fixture.h"
#include "tests/test_support.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

using namespace agent_test;  // NOLINT: the fixture and its helpers

// The flight recorder of `pid` is recording: its record said so in its log.
bool FlightRecording(const std::string& out, uint32_t pid) {
  std::string log = test::ReadFile(out + "/.partial/flight-" + std::to_string(pid) + ".pftrace.log");
  return log.find("flight recorder: recording") != std::string::npos;
}

std::vector<JsonValue> Dumps(const std::string& out) {
  std::vector<JsonValue> dumps;
  for (const JsonValue& entry : ReadIndex(out))
    if (!Str(entry, "dump").empty()) dumps.push_back(entry);
  return dumps;
}

// Done-when 1 under the agent: two Gloo ranks, each its own target and
// flight recorder (light tier, the agent's default); rank 1 stops calling
// all_reduce. Both ranks' stall dumps are indexed, and report over their
// stall reports names rank 1.
TEST_F(AgentTest, FlightRecorderNamesTheStalledRank) {
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  std::string script = test::TrainScript();
  script.replace(script.rfind("train.py"), 8, "stall_ranks.py");
  std::string ready = dir_ + "/" + token_ + ".ready", go = dir_ + "/go";
  pid_t ranks = test::Spawn({test::Python(), script, "20", "29771", "8", ready, go}, dir_ + "/ranks.out");
  targets_.push_back(ranks);
  ASSERT_TRUE(test::WaitUntil([&] { return test::FileExists(ready + ".0") && test::FileExists(ready + ".1"); }, kBound))
      << test::ReadFile(dir_ + "/ranks.out");
  uint32_t rank0 = static_cast<uint32_t>(std::stoul(test::ReadFile(ready + ".0")));
  uint32_t rank1 = static_cast<uint32_t>(std::stoul(test::ReadFile(ready + ".1")));
  StartAgent({"--flight-recorder", "20", "--stall-after", "3", "--no-windows", "--plan-cache", dir_ + "/plans"});
  ASSERT_TRUE(test::WaitUntil([&] { return FlightRecording(out_, rank0) && FlightRecording(out_, rank1); }, kBound))
      << Log();
  test::WriteFile(go, "");
  EXPECT_EQ(test::Wait(ranks), 0) << test::ReadFile(dir_ + "/ranks.out");
  targets_.clear();
  ASSERT_TRUE(test::WaitUntil([&] { return Dumps(out_).size() >= 2; }, 30)) << Log();
  EXPECT_EQ(StopAgent(), 0) << Log();
  ExpectIndexMatchesFiles(out_);
  std::vector<std::string> reports;
  std::set<uint64_t> pids;
  for (const JsonValue& dump : Dumps(out_)) {
    EXPECT_EQ(Str(dump, "dump"), "stall") << Log();
    pids.insert(Num(dump, "pid"));
    std::vector<std::string> companions = Companions(dump);
    ASSERT_EQ(companions.size(), 2u);
    EXPECT_NE(companions[0].find(".stall.txt"), std::string::npos);
    reports.push_back(out_ + "/" + companions[1]);
  }
  EXPECT_EQ(pids, (std::set<uint64_t>{rank0, rank1})) << "each rank's own recorder dumped it";
  std::vector<std::string> argv = {test::TorchprobeBinary(), "report"};
  argv.insert(argv.end(), reports.begin(), reports.end());
  test::CommandResult r = test::RunCommand(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(r.out, match, std::regex("rank 0 \\(pid [0-9]+\\) on [^ ]+ entered collective #([0-9]+) \\(c10d::allreduce_\\)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("rank 1 \\(pid [0-9]+\\) on [^ ]+ never entered collective #" +
                                                  std::string(match[1]) + ": its last was #[0-9]+")))
      << r.out;
}

// Done-when 4: `trigger --dump` answers with the dump's file within 1 s; the
// recorder goes on; --dump-at-stop dumps again at SIGTERM.
TEST_F(AgentTest, TriggerDumpWritesWithinOneSecond) {
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
  pid_t train = StartTrain("flight");
  StartAgent({"--flight-recorder", "10", "--flight-tier", "full", "--dump-at-stop", "--no-windows", "--chrome",
              "--plan-cache", dir_ + "/plans"});
  ASSERT_TRUE(test::WaitUntil([&] { return FlightRecording(out_, static_cast<uint32_t>(train)); }, kBound)) << Log();
  usleep(1'000'000);
  auto asked = std::chrono::steady_clock::now();
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "trigger", "--pid", std::to_string(train),
                                            "--dump", "--socket", dir_ + "/agent.sock"});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  ASSERT_EQ(r.exit_code, 0) << r.err << Log();
  EXPECT_LT(seconds, 1.0) << "the dump was answered after " << seconds << " s";
  std::string file = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(test::FileExists(file)) << file;
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(file, &trace, &error)) << error;
  EXPECT_GT(trace.slice_count(), 100u) << "the full tier: the loop's ops";
  // No flight recorder for a pid that is no target; none on an agent without one.
  r = test::RunCommand({test::TorchprobeBinary(), "trigger", "--pid", "1", "--dump", "--socket", dir_ + "/agent.sock"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no flight recorder runs on pid 1"), std::string::npos) << r.err;
  EXPECT_EQ(StopAgent(), 0) << Log();
  std::vector<JsonValue> dumps = Dumps(out_);
  ASSERT_EQ(dumps.size(), 2u) << Log();
  EXPECT_EQ(Str(dumps[0], "dump"), "request");
  EXPECT_TRUE(dumps[0].Find("triggered")->boolean);
  EXPECT_EQ(Str(dumps[1], "dump"), "request") << "--dump-at-stop asks as trigger does";
  ExpectIndexMatchesFiles(out_);
  // --chrome: each dump's Kineto JSON beside it, indexed with it, the same ops.
  for (const JsonValue& dump : dumps) {
    std::vector<std::string> companions = Companions(dump);
    ASSERT_EQ(companions.size(), 3u);
    EXPECT_NE(companions[2].find(".kineto.json"), std::string::npos) << companions[2];
    std::string kineto = test::ReadFile(out_ + "/" + companions[2]);
    EXPECT_NE(kineto.find("\"traceEvents\""), std::string::npos);
    EXPECT_NE(kineto.find("\"cat\": \"cpu_op\""), std::string::npos) << kineto.substr(0, 400);
  }
}

TEST(AgentFlightCliTest, BadInputIsOneLine) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"--stall-after", "3"}, {"--dump-at-stop"}, {"--no-windows"}, {"--flight-recorder", "5", "--flight-tier", "x"}}) {
    std::vector<std::string> argv = {test::TorchprobeBinary(), "agent", "-o", "/tmp/torchprobe-never"};
    argv.insert(argv.end(), args.begin(), args.end());
    test::CommandResult r = test::RunCommand(argv);
    EXPECT_EQ(r.exit_code, 2) << args[0];
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
  }
}

}  // namespace
}  // namespace torchprobe
