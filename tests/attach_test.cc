// Attach without PyTorch: the fake libtorch_cpu.so and op_storm (tests/
// fixtures), traced with uprobe_multi links and with the per-symbol uprobe
// fallback; and the stop paths a user meets (SIGINT). Needs root.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <string>

#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {


class AttachTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    if (!test::FileExists(test::FixturePath("op_storm"))) GTEST_SKIP() << "fixtures not built (make test)";
    dir_ = test::MakeTempDir();
  }
  void TearDown() override {
    for (const std::string& name : test::ListDir(dir_)) unlink((dir_ + "/" + name).c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_P(AttachTest, EveryCallNestedAndNamed) {
  std::string out = dir_ + "/storm.pftrace";
  test::CommandResult r =
      test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--attach", GetParam(), "-o", out,
                        "--", test::FixturePath("op_storm"), "500"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("op_storm 500 ", 0), 0u) << r.out;
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  EXPECT_EQ(trace.stats.attach_mode, GetParam() == std::string("multi") ? "uprobe_multi" : "uprobe");
  EXPECT_EQ(trace.stats.probed_symbols, 2u) << "add_Tensor::call and linear::call, not redispatch";
  EXPECT_EQ(trace.stats.unresolved_symbols, 0u);
  EXPECT_EQ(trace.stats.begin_repaired + trace.stats.end_repaired, 0u);
  std::map<std::string, size_t> calls;
  for (const DecodedThread& t : trace.threads) {
    for (const DecodedSlice& s : t.slices) {
      const OpInfo& op = trace.ops[s.op];
      ++calls[op.name];
      if (op.name == "aten::add") {
        EXPECT_EQ(op.overload, "Tensor");
        EXPECT_EQ(op.schema, "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
        ASSERT_GE(s.parent, 0);
        EXPECT_EQ(trace.ops[t.slices[s.parent].op].name, "aten::linear");
      }
    }
  }
  EXPECT_EQ(calls["aten::linear"], 500u);
  EXPECT_EQ(calls["aten::add"], 500u);
}

INSTANTIATE_TEST_SUITE_P(Modes, AttachTest, ::testing::Values("multi", "uprobe"));

TEST_F(AttachTest, SigintFinishesTheTrace) {
  std::string out = dir_ + "/sigint.pftrace";
  pid_t target = test::Spawn({test::FixturePath("op_storm"), "2000000000"}, "/dev/null");
  usleep(200 * 1000);
  // Not a PyTorch process by name: the fake libtorch_cpu.so makes it one.
  // torchprobe stops itself once the target is traced (a test hook): the
  // SIGINT comes while it records, however long attaching took.
  pid_t tracer = test::Spawn({"env", "TORCHPROBE_TEST_PAUSE=recording", test::TorchprobeBinary(), "record", "-q",
                              "--attach", "multi", "--pid", std::to_string(target), "-o", out},
                             "/dev/null");
  ASSERT_TRUE(test::WaitUntil([&] { return ReadProcessState(static_cast<uint32_t>(tracer)) == 'T'; }, 60))
      << "torchprobe never attached";
  kill(tracer, SIGCONT);
  usleep(300 * 1000);
  kill(tracer, SIGINT);
  EXPECT_EQ(test::Wait(tracer), 0);
  kill(target, SIGKILL);
  test::Wait(target);
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  EXPECT_GT(trace.slice_count(), 0u);
  EXPECT_EQ(trace.unterminated, 0u);
}

TEST_F(AttachTest, SeveralPidsOneTrace) {
  std::string out = dir_ + "/two.pftrace";
  pid_t a = test::Spawn({test::FixturePath("op_storm"), "2000000000"}, "/dev/null");
  pid_t b = test::Spawn({test::FixturePath("op_storm"), "2000000000"}, "/dev/null");
  usleep(200 * 1000);
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "-q", "--pid", std::to_string(a) + "," + std::to_string(b),
       "--duration", "1", "-o", out});
  for (pid_t pid : {a, b}) {
    kill(pid, SIGKILL);
    test::Wait(pid);
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  // One image, probed once per process with the kernel filtering each link.
  EXPECT_EQ(trace.stats.probed_symbols, 4u);
  ASSERT_NE(trace.FindThread(a, a), nullptr);
  ASSERT_NE(trace.FindThread(b, b), nullptr);
  EXPECT_GT(trace.FindThread(a, a)->slices.size(), 0u);
  EXPECT_GT(trace.FindThread(b, b)->slices.size(), 0u);
}

}  // namespace
}  // namespace torchprobe
