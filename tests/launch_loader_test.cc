// Launch mode follows the command through every exec into any dynamic
// loader: env -> sh -> unshare -> chroot into the PyTorch 2.x root, whose
// python3 runs with the root's own ld.so, still sees the program's first op.
// The same chain into a program that never loads libtorch ends with the
// one-line error and no file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/test_support.h"

namespace torchprobe {
namespace {

class LaunchLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    root_ = test::Torch2Root();
    if (root_.empty()) GTEST_SKIP() << test::Torch2RootMissing();
    dir_ = test::MakeTempDir();
  }
  void TearDown() override {
    if (!script_.empty()) unlink((root_ + script_).c_str());
    if (!copied_.empty()) test::RunCommand({"rm", "-rf", copied_});
    if (!dir_.empty()) test::RunCommand({"rm", "-rf", dir_});
  }
  // env -> sh -> unshare -> sh -> chroot -> the root's python3 (its loader).
  std::vector<std::string> Chain(const std::string& program) {
    return {"env", "TORCHPROBE_CHAIN=1", "sh", "-c", "exec \"$@\"", "sh", "unshare", "-m", "sh", "-c",
            "mount -t proc proc \"$0/proc\" && exec chroot \"$0\" \"$@\"", root_, program};
  }
  std::string root_, dir_, script_, copied_;
};

TEST_F(LaunchLoaderTest, NestedExecsIntoAnotherLoaderSeeTheFirstOp) {
  if (test::TraceProcessor().empty()) GTEST_SKIP() << "needs ../shared/tools/trace_processor_shell";
  script_ = "/tmp/torchprobe-launch-loader-" + std::to_string(getpid()) + ".py";
  std::ofstream(root_ + script_) << "import torch\nfor _ in range(5):\n    torch.eye(3)\n";
  std::string trace = dir_ + "/chain.pftrace";
  std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "-o", trace, "--"};
  for (const std::string& arg : Chain("python3")) argv.push_back(arg);
  argv.push_back(script_);
  test::CommandResult r = test::RunCommand(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = test::QueryTrace(trace, "select count(*) from slice where name = 'aten::eye' and depth = 0");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0][0], "5") << "every top-level aten::eye, the first included";
}

// A program that needs libtorch (DT_NEEDED) has it mapped by the new loader
// before its first instruction: held at its exec until that loader is
// watched, its every op is seen (op_storm: 2 ops per iteration).
TEST_F(LaunchLoaderTest, AProgramLinkedToTorchRunByAnotherLoaderIsSeenWhole) {
  if (!test::FileExists(test::FixturePath("op_storm"))) GTEST_SKIP() << "fixtures not built (make test)";
  std::string dir = "/tmp/torchprobe-launch-loader-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"mkdir", "-p", root_ + dir}).exit_code, 0);
  copied_ = root_ + dir;
  ASSERT_EQ(test::RunCommand({"cp", test::FixturePath("op_storm"), test::FixturePath("libtorch_cpu.so"), root_ + dir})
                .exit_code, 0);
  std::string trace = dir_ + "/storm.pftrace";
  for (int run = 0; run < 3; ++run) {  // the exec races the loader without the hold
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-o", trace, "--"};
    for (const std::string& arg : Chain(dir + "/op_storm")) argv.push_back(arg);
    argv.push_back("50");
    test::CommandResult r = test::RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(": 200 op events, 0 dropped"), std::string::npos) << r.err;
  }
}

TEST_F(LaunchLoaderTest, AChainThatNeverLoadsTorchIsOneWarningAndNoFile) {
  std::string trace = dir_ + "/none.pftrace";
  std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "-o", trace, "--"};
  for (const std::string& arg : Chain("true")) argv.push_back(arg);
  test::CommandResult r = test::RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << "the command's own status";
  EXPECT_EQ(r.err,
            "torchprobe: warning: the command never loaded libtorch_cpu.so: not a PyTorch program, nothing traced, "
            "no file written\n");
  EXPECT_FALSE(test::FileExists(trace));
}

}  // namespace
}  // namespace torchprobe
