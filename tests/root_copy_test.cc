// The collector's copy into a target's /tmp (attach/root_copy) never
// follows a symlink out of the target's root. The target: cupti_loop
// chrooted into a small root built here (it, its fake CUDA libraries, and
// the system libraries it and the collector need), whose /tmp holds
// symlinks to files outside the root at the names torchprobe used for the
// copy (or /tmp itself a symlink). The files outside must keep their bytes,
// and nothing may appear beside them. Directly (on every machine: the copy
// comes before any breakpoint) and through `record --inject-cupti`, which
// injects or says why in one line.
#include "userspace/attach/root_copy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"

namespace torchprobe {
namespace {

class RootCopyTest : public test::ScratchTest {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (chroot, /proc/PID/root)";
    if (!test::FileExists(test::FixturePath("cuda/cupti_loop")) || !test::FileExists(test::CollectorPath()))
      GTEST_SKIP() << "fixtures or the collector not built (make test)";
    ScratchTest::SetUp();
    root_ = dir_ + "/root";
    outside_ = dir_ + "/outside";
    // The loop beside its fake CUDA, found by LD_LIBRARY_PATH (no /proc in
    // the root for ld.so to find its $ORIGIN).
    ASSERT_EQ(test::RunCommand({"mkdir", "-p", root_ + "/loop", outside_}).exit_code, 0);
    for (const char* file : {"cupti_loop", "libtorch_cpu.so", "libcudart.so.13", "libcuda.so.1", "libcupti.so.13"})
      ASSERT_EQ(test::RunCommand({"cp", test::FixturePath(std::string("cuda/") + file), root_ + "/loop/"}).exit_code,
                0);
    // The system libraries of the loop and of the collector, at their paths.
    for (const std::string& binary : {root_ + "/loop/cupti_loop", test::CollectorPath()}) {
      std::istringstream ldd(test::RunCommand({"ldd", binary}).out);
      for (std::string word; ldd >> word;) {
        if (word.rfind("/lib", 0) == 0 || word.rfind("/usr/lib", 0) == 0) {
          ASSERT_EQ(test::RunCommand({"cp", "-L", "--parents", word, root_}).exit_code, 0) << word;
        }
      }
    }
    // The files a redirected write would reach, and what they hold.
    for (int i = 0; i < 3; ++i)
      test::WriteFile(outside_ + "/victim" + std::to_string(i), "precious " + std::to_string(i));
    before_ = Outside();
  }
  // Every file outside the root, by name: its size and a checksum of its bytes.
  std::map<std::string, std::string> Outside() const {
    std::map<std::string, std::string> files;
    for (const std::string& name : test::ListDir(outside_)) {
      std::string bytes = test::ReadFile(outside_ + "/" + name);
      files[name] = std::to_string(bytes.size()) + " bytes, hash " + std::to_string(std::hash<std::string>{}(bytes));
    }
    return files;
  }
  // The root's /tmp, sticky and open to all as usual, with a symlink out of
  // the root at each name a copy of the collector had: the
  // libtorchprobe_cupti-<dev>-<ino>.so of torchprobe before random names,
  // its ".partial", and the plain name.
  void PlantSymlinks() {
    ASSERT_EQ(mkdir((root_ + "/tmp").c_str(), 0755), 0);
    ASSERT_EQ(chmod((root_ + "/tmp").c_str(), 01777), 0);
    std::string identity = ImageIdentity(test::CollectorPath());
    for (char& c : identity)
      if (c == ':') c = '-';
    std::string old_name = "libtorchprobe_cupti-" + identity + ".so";
    int i = 0;
    for (const std::string& name : {old_name, old_name + ".partial", std::string("libtorchprobe_cupti.so")}) {
      std::string target = outside_ + "/victim" + std::to_string(i++ % 3);
      ASSERT_EQ(symlink(target.c_str(), (root_ + "/tmp/" + name).c_str()), 0) << name;
      planted_.push_back(name);
    }
    std::sort(planted_.begin(), planted_.end());
  }
  // cupti_loop in the root (`idle`: no CUDA launch ever), a few steps in.
  pid_t StartTarget(const std::string& name, bool idle) {
    std::vector<std::string> argv = {"env",     "LD_LIBRARY_PATH=/loop", "chroot", root_, "/loop/cupti_loop",
                                     "--until", "/" + name + ".stop"};
    if (idle) argv.push_back("--idle");
    pid_t pid = test::Spawn(argv, dir_ + "/" + name + ".out");
    spawned_.push_back(pid);
    EXPECT_TRUE(test::WaitUntil(
        [&] { return test::ReadFile(dir_ + "/" + name + ".out").find("step 3 ") != std::string::npos; }, 60))
        << test::ReadFile(dir_ + "/" + name + ".out");
    return pid;
  }
  std::vector<std::string> TmpNames() const {
    std::vector<std::string> names = test::ListDir(root_ + "/tmp");
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string root_, outside_;
  std::map<std::string, std::string> before_;
  std::vector<std::string> planted_;
};

TEST_F(RootCopyTest, SymlinksInTheTargetsTmpAreNeverFollowed) {
  PlantSymlinks();
  pid_t pid = StartTarget("loop", true);
  {
    StatusOr<std::unique_ptr<RootCopy>> copy =
        RootCopy::Make(pid, test::CollectorPath(), "libtorchprobe_cupti-", ".so");
    ASSERT_TRUE(copy.ok()) << copy.status().message();
    EXPECT_EQ((*copy)->path().rfind("/tmp/libtorchprobe_cupti-", 0), 0u) << (*copy)->path();
    struct stat st;
    ASSERT_EQ(lstat((root_ + (*copy)->path()).c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0444u) << "readable by the target's user, written by no one";
    EXPECT_TRUE(test::ReadFile(root_ + (*copy)->path()) == test::ReadFile(test::CollectorPath())) << "a whole copy";
    // Another injection into the same root at the same time: its own file.
    StatusOr<std::unique_ptr<RootCopy>> other =
        RootCopy::Make(pid, test::CollectorPath(), "libtorchprobe_cupti-", ".so");
    ASSERT_TRUE(other.ok()) << other.status().message();
    EXPECT_NE((*other)->path(), (*copy)->path());
    EXPECT_EQ(Outside(), before_);
  }
  EXPECT_EQ(TmpNames(), planted_) << "the copies removed, the symlinks left as they were";
  EXPECT_EQ(Outside(), before_);
}

TEST_F(RootCopyTest, ATmpThatIsASymlinkNotADirectoryOrOpenToAllIsRefused) {
  ASSERT_EQ(mkdir((root_ + "/tmp").c_str(), 0755), 0);
  pid_t pid = StartTarget("loop", true);
  auto refused = [&](const std::string& why) {
    StatusOr<std::unique_ptr<RootCopy>> copy =
        RootCopy::Make(pid, test::CollectorPath(), "libtorchprobe_cupti-", ".so");
    ASSERT_FALSE(copy.ok());
    EXPECT_EQ(copy.status().message(), why);
    EXPECT_EQ(Outside(), before_);
  };
  ASSERT_EQ(rmdir((root_ + "/tmp").c_str()), 0);
  ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/tmp").c_str()), 0);  // absolute: the host's, through /proc/PID/root
  refused("its /tmp is a symlink");
  ASSERT_EQ(unlink((root_ + "/tmp").c_str()), 0);
  ASSERT_EQ(symlink("../outside", (root_ + "/tmp").c_str()), 0);  // relative, out of the root
  refused("its /tmp is a symlink");
  ASSERT_EQ(unlink((root_ + "/tmp").c_str()), 0);
  test::WriteFile(root_ + "/tmp", "");
  refused("its /tmp is not a directory");
  ASSERT_EQ(unlink((root_ + "/tmp").c_str()), 0);
  ASSERT_EQ(mkdir((root_ + "/tmp").c_str(), 0755), 0);
  ASSERT_EQ(chmod((root_ + "/tmp").c_str(), 0777), 0);
  refused("its /tmp is writable by others without the sticky bit");
  ASSERT_EQ(chown((root_ + "/tmp").c_str(), 4242, 4242), 0);
  ASSERT_EQ(chmod((root_ + "/tmp").c_str(), 0755), 0);
  refused("its /tmp belongs to uid 4242, neither root nor its user");
}

// done-when 1 of issue 22: `record --inject-cupti` into such a root either
// loads the collector or says why in one line; the files outside keep their
// bytes, and no copy stays in the root's /tmp.
TEST_F(RootCopyTest, RecordIntoSuchARootInjectsSafelyOrSaysWhy) {
  PlantSymlinks();
  pid_t pid = StartTarget("loop", false);
  auto record = [&](pid_t target, const std::string& name) {
    test::CommandResult r =
        test::RunCommand({test::TorchprobeBinary(), "record", "--pid", std::to_string(target), "--inject-cupti",
                          "--duration", "0.5", "-o", dir_ + "/" + name + ".pftrace"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string p = std::to_string(target);
    bool loaded = r.err.find("--inject-cupti: collector loaded into pid " + p + " ") != std::string::npos;
    size_t begin = r.err.find("torchprobe: --inject-cupti: pid " + p + ": ");
    std::string why = begin == std::string::npos ? "" : r.err.substr(begin, r.err.find('\n', begin) - begin);
    EXPECT_TRUE(loaded || why.ends_with(": GPU side not injected, CPU only")) << r.err;
    EXPECT_EQ(Outside(), before_) << r.err;
    return r.err;
  };
  record(pid, "symlinks");
  EXPECT_EQ(TmpNames(), planted_);
  // /tmp itself a symlink out of the root, for a target not injected yet.
  pid_t second = StartTarget("second", false);
  ASSERT_EQ(test::RunCommand({"rm", "-rf", root_ + "/tmp"}).exit_code, 0);
  ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/tmp").c_str()), 0);
  std::string err = record(second, "tmp-symlink");
  if (err.find("debug registers do not trap") == std::string::npos) {
    EXPECT_NE(err.find("cannot copy the collector into its root: its /tmp is a symlink"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace torchprobe
