// Bad input: one line on stderr that says what and why, the documented exit
// code (2 usage, 1 runtime), and no output file left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/test_support.h"

namespace torchprobe {
namespace {

using test::CommandResult;
using test::ListDir;
using test::RunCommand;
using test::TorchprobeBinary;

int CountLines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::MakeTempDir();
    out_ = dir_ + "/out.pftrace";
  }
  void TearDown() override {
    // Nothing written half-way: not the trace, not a temporary.
    EXPECT_TRUE(ListDir(dir_).empty()) << "left files in " << dir_;
    for (const std::string& name : ListDir(dir_)) unlink((dir_ + "/" + name).c_str());
    rmdir(dir_.c_str());
  }
  // Runs torchprobe; expects `code` and a message containing `what`.
  void ExpectError(const std::vector<std::string>& args, int code, const std::string& what,
                   const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv = {TorchprobeBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    ExpectErrorFrom(argv, code, what, env);
  }
  // Same, for a full command line (torchprobe run through another program).
  void ExpectErrorFrom(const std::vector<std::string>& argv, int code, const std::string& what,
                       const std::vector<std::string>& env = {}) {
    CommandResult r = RunCommand(argv, env);
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << "stderr: " << r.err;
    EXPECT_EQ(r.err.rfind("torchprobe: ", 0), 0u) << r.err;
    // One line, plus the --help hint for usage errors.
    EXPECT_EQ(CountLines(r.err), code == 2 ? 2 : 1) << r.err;
    if (code == 2) {
      EXPECT_NE(r.err.find("--help"), std::string::npos) << r.err;
    }
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  std::string dir_, out_;
};

TEST_F(CliTest, UsageErrors) {
  ExpectError({}, 2, "missing command");
  ExpectError({"frobnicate"}, 2, "unknown command 'frobnicate'");
  ExpectError({"record", "--bogus", "-o", out_}, 2, "unknown option '--bogus'");
  ExpectError({"record", "-o", out_}, 2, "needs --pid PID or -- COMMAND");
  ExpectError({"record", "--pid", "abc", "-o", out_}, 2, "invalid pid 'abc'");
  ExpectError({"record", "--pid", "12,x3", "-o", out_}, 2, "invalid pid 'x3'");
  ExpectError({"record", "--pid", "1", "--duration", "soon", "-o", out_}, 2, "invalid --duration");
  ExpectError({"record", "--pid", "1", "--", "true"}, 2, "not both");
  ExpectError({"record", "--wait", "--", "true"}, 2, "--wait goes with --pid");
  // 2^32 bytes wrapped to 0 in a 32-bit shift, and BPF's size is 32-bit.
  ExpectError({"record", "--pid", "1", "--ring-mb", "4096", "-o", out_}, 2, "up to 2048");
  ExpectError({"record", "--pid", "1", "--ring-mb", "96", "-o", out_}, 2, "expected a power of 2");
  ExpectError({"report"}, 2, "report needs a trace file");
  ExpectError({"report", "--bogus", "x"}, 2, "unknown option '--bogus' for report");
}

// The command line is fine but the command cannot run: one line, and the
// status a shell (or `env`, `time`) gives, not a usage error.
TEST_F(CliTest, CommandThatCannotRun) {
  ExpectError({"record", "-o", out_, "--", "/no/such/command"}, 127, "cannot run /no/such/command");
  ExpectError({"record", "-o", out_, "--", "no-such-command-xyz"}, 127,
              "cannot run no-such-command-xyz: command not found");
  std::string text_dir = test::MakeTempDir(), text = text_dir + "/data.txt";
  std::ofstream(text) << "not a program\n";
  chmod(text.c_str(), 0644);
  ExpectError({"record", "-o", out_, "--", text}, 126, "not an executable file");
  unlink(text.c_str());
  rmdir(text_dir.c_str());
}

TEST_F(CliTest, HelpExitsZero) {
  CommandResult r = RunCommand({TorchprobeBinary(), "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("torchprobe record [OPTIONS] --pid"), std::string::npos);
  // Each subcommand's own help, every way a user asks for it.
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"record", "--help"}, {"record", "-h"}, {"help", "record"}, {"record", "--pid", "1", "--help"}}) {
    args.insert(args.begin(), TorchprobeBinary());
    r = RunCommand(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("--duration SECS"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--no-children"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("exits with\n                       its status"), std::string::npos) << r.out;
  }
  for (std::vector<std::string> args :
       std::vector<std::vector<std::string>>{{"report", "--help"}, {"help", "report"}}) {
    args.insert(args.begin(), TorchprobeBinary());
    r = RunCommand(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("(default 30)"), std::string::npos) << r.out;
  }
  r = RunCommand({TorchprobeBinary(), "--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("torchprobe 0.", 0), 0u) << r.out;
}

TEST_F(CliTest, ReportRejectsWhatIsNotATrace) {
  ExpectError({"report", dir_ + "/missing.pftrace"}, 1, "No such file or directory");
  std::string bad = test::MakeTempDir();
  std::ofstream(bad + "/empty.pftrace").close();
  ExpectError({"report", bad + "/empty.pftrace"}, 1, "empty");
  std::ofstream(bad + "/text.pftrace") << "hello, this is not a trace\n";
  ExpectError({"report", bad + "/text.pftrace"}, 1, "not a Perfetto trace");
  // A packet header that promises more bytes than the file has.
  std::ofstream(bad + "/cut.pftrace", std::ios::binary) << std::string("\x0a\x40\x08\x01", 4);
  ExpectError({"report", bad + "/cut.pftrace"}, 1, "truncated");
  for (const std::string& name : ListDir(bad)) unlink((bad + "/" + name).c_str());
  rmdir(bad.c_str());
}

TEST_F(CliTest, RecordRuntimeErrors) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root";
  ExpectError({"record", "--pid", "999999999", "-o", out_}, 1, "no process with pid 999999999");
  // A live process that is not a PyTorch one: says which library is missing.
  pid_t sleeper = test::Spawn({"sleep", "30"}, "/dev/null");
  ExpectError({"record", "--pid", std::to_string(sleeper), "-o", out_}, 1, "libtorch_cpu.so");
  kill(sleeper, SIGKILL);
  test::Wait(sleeper);
}

// A launched command that never loads libtorch: its own exit status (as
// documented), with one warning line, and no file.
TEST_F(CliTest, ALaunchedCommandWithoutTorchGivesItsOwnStatus) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root";
  for (auto [command, code] : {std::pair{"true", 0}, std::pair{"false", 1}}) {
    CommandResult r = RunCommand({TorchprobeBinary(), "record", "-o", out_, "--", command});
    EXPECT_EQ(r.exit_code, code) << command << ": " << r.err;
    EXPECT_EQ(r.err, "torchprobe: warning: the command never loaded libtorch_cpu.so: not a PyTorch program, "
                     "nothing traced, no file written\n");
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  CommandResult r = RunCommand({TorchprobeBinary(), "record", "-o", out_, "--", "sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
}

// --memory-timeline: a name it cannot write is refused before anything is
// attached, and neither file is left behind.
TEST_F(CliTest, MemoryTimelineName) {
  ExpectError({"record", "-o", out_, "--memory-timeline"}, 2, "--memory-timeline needs a file name");
  ExpectError({"record", "--memory-timeline", "-o", out_}, 2, "--memory-timeline needs a file name");
  if (!test::IsRoot() || !test::HaveTorch()) GTEST_SKIP() << "needs root and torch";
  ExpectError({"record", "-o", out_, "--memory-timeline", dir_ + "/t.txt", "--", test::Python(), "-c", "1"}, 1,
              "must end in .json or .html");
  ExpectError({"record", "-o", out_, "--memory-timeline", dir_ + "/no/such/t.json", "--", test::Python(), "-c", "1"},
              1, "cannot write");
}

// --memory-snapshot: the same for the allocator snapshot's name.
TEST_F(CliTest, MemorySnapshotName) {
  ExpectError({"record", "-o", out_, "--memory-snapshot"}, 2, "--memory-snapshot needs a file name");
  ExpectError({"record", "--memory-snapshot", "-o", out_}, 2, "--memory-snapshot needs a file name");
  if (!test::IsRoot() || !test::HaveTorch()) GTEST_SKIP() << "needs root and torch";
  ExpectError({"record", "-o", out_, "--memory-snapshot", dir_ + "/s.json", "--", test::Python(), "-c", "1"}, 1,
              "must end in .pickle");
  ExpectError({"record", "-o", out_, "--memory-snapshot", dir_ + "/no/such/s.pickle", "--", test::Python(), "-c", "1"},
              1, "cannot write");
  ExpectError({"record", "--flight-recorder", "5", "--memory-snapshot", dir_ + "/s.pickle", "--", test::Python(), "-c",
               "1"},
              2, "--memory-snapshot");
}

TEST_F(CliTest, UnwritableOutput) {
  if (!test::IsRoot() || !test::HaveTorch()) GTEST_SKIP() << "needs root and torch";
  ExpectError({"record", "-o", dir_ + "/no/such/dir/x.pftrace", "--", test::Python(), "-c", "1"}, 1,
              "cannot write");
}

TEST_F(CliTest, NotRootSaysWhatIsMissing) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root to drop privileges";
  if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "needs setpriv";
  chmod(dir_.c_str(), 0777);
  ExpectErrorFrom({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
               "--inh-caps=-all", "--bounding-set=-all", TorchprobeBinary(), "record", "--pid", "1",
                   "-o", out_},
                  1, "must run as root: missing CAP_BPF");
}

TEST_F(CliTest, KernelWithoutUprobePmu) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root";
  ExpectError({"record", "--attach", "uprobe", "--pid", "1", "-o", out_}, 1,
              "kernel without the uprobe PMU", {"TORCHPROBE_UPROBE_PMU=/nonexistent/uprobe/type"});
}

}  // namespace
}  // namespace torchprobe
