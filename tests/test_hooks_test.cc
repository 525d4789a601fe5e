// The hooks tests use to reach inside a run are honoured by any torchprobe,
// so each must be harmless where nobody is testing: TORCHPROBE_TEST_PAUSE
// stops torchprobe for a bounded time only (its probes live meanwhile), and
// $TORCHPROBE_CUPTI_DUMP never writes through a symlink left at its path.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "tests/cupti_stream_text.h"
#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"

namespace torchprobe {
namespace {

class TestHooksTest : public test::ScratchTest {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    if (!test::FileExists(test::FixturePath("cuda/cupti_loop"))) GTEST_SKIP() << "fixtures not built (make test)";
    ScratchTest::SetUp();
  }
};

// Stopped where the variable says, and nobody continues it: torchprobe goes
// on by itself and finishes its run.
TEST_F(TestHooksTest, AForgottenPauseEndsByItself) {
  std::string stop = dir_ + "/stop";
  pid_t target = test::Spawn({test::FixturePath("cuda/cupti_loop"), "--until", stop}, dir_ + "/loop.out");
  spawned_.push_back(target);
  ASSERT_TRUE(
      test::WaitUntil([&] { return test::ReadFile(dir_ + "/loop.out").find("step") != std::string::npos; }, 60));
  pid_t tracer = test::Spawn({"env", "TORCHPROBE_TEST_PAUSE=recording", test::TorchprobeBinary(), "record", "-q",
                              "--pid", std::to_string(target), "--duration", "0.3", "-o", dir_ + "/t.pftrace"},
                             "/dev/null");
  spawned_.push_back(tracer);
  ASSERT_TRUE(test::WaitUntil([&] { return ReadProcessState(static_cast<uint32_t>(tracer)) == 'T'; }, 60))
      << "torchprobe never reached the pause";
  // Exited (a zombie until reaped): it went on without a SIGCONT.
  ASSERT_TRUE(test::WaitUntil([&] { return ReadProcessState(static_cast<uint32_t>(tracer)) == 'Z'; }, 60))
      << "still stopped";
  EXPECT_EQ(test::Wait(tracer), 0);
  EXPECT_TRUE(test::FileExists(dir_ + "/t.pftrace"));
  test::WriteFile(stop, "");
  EXPECT_EQ(test::Wait(target), 0);
}

// Someone left a symlink where the dump goes: the file it points at keeps
// its bytes, and the dump appears, whole, in the symlink's place.
TEST_F(TestHooksTest, TheCuptiDumpNeverWritesThroughASymlink) {
  std::string collector = test::TorchprobeBinary();
  collector = collector.substr(0, collector.rfind('/')) + "/libtorchprobe_cupti.so";
  if (!test::FileExists(collector)) GTEST_SKIP() << "the collector is not built (make test)";
  std::string victim = dir_ + "/victim", dump = dir_ + "/dump.txt";
  test::WriteFile(victim, "precious\n");
  ASSERT_EQ(symlink(victim.c_str(), dump.c_str()), 0);
  test::CommandResult r =
      test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--cupti", "-o", dir_ + "/t.pftrace", "--",
                        test::FixturePath("cuda/cupti_loop"), "10"},
                       {"TORCHPROBE_CUPTI_DUMP=" + dump});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::ReadFile(victim), "precious\n");
  struct stat st;
  ASSERT_EQ(lstat(dump.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  test::GoldenStream stream;
  std::string error;
  EXPECT_TRUE(test::ParseGoldenStream(test::ReadFile(dump), &stream, &error)) << error;
  EXPECT_NE(test::ReadFile(dump).find("kernel"), std::string::npos);
}

}  // namespace
}  // namespace torchprobe
