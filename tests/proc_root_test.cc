// A target's mapped file is read from that very file (device and inode),
// never from another one at the same path: a file mounted over the path in
// the target's mount namespace (same inode number, another filesystem), or
// the host's same-named file once the target is gone (a container's
// /usr/lib/x.so is not the host's). Root: mounts, /proc/PID/map_files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"
#include "userspace/discover/address_symbols.h"
#include "userspace/discover/remote_symbols.h"

namespace torchprobe {
namespace {

class ProcRootTest : public test::ScratchTest {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (mounts, map_files)";
    if (!test::FileExists(test::FixturePath("op_storm"))) GTEST_SKIP() << "fixtures not built (make test)";
    ScratchTest::SetUp();
  }
};

TEST_F(ProcRootTest, AFileMountedOverTheMappedPathIsNotTakenForIt) {
  // In a mount namespace of its own: op_storm and the fake libtorch on one
  // tmpfs, run, then a second tmpfs over the folder with other bytes in
  // files made in the same order (tmpfs numbers inodes per filesystem: the
  // same numbers). The maps line still names the path.
  std::string libtorch = test::FixturePath("libtorch_cpu.so");
  std::string script =
      "d=\"$0/x\"; mount -t tmpfs none \"$d\" && cp \"$1\" \"$2\" \"$d/\" && \"$d/op_storm\" 4000000000 & "
      "p=$!; while ! grep -q libtorch_cpu \"/proc/$p/maps\" 2>/dev/null; do sleep 0.05; done; "
      "mount -t tmpfs none \"$d\" && echo other > \"$d/op_storm\" && echo other > \"$d/libtorch_cpu.so\" && "
      "ls -i \"$d/libtorch_cpu.so\" > \"$0/inode\" && echo $p > \"$0/pid\"; wait";
  ASSERT_EQ(mkdir((dir_ + "/x").c_str(), 0755), 0);
  spawned_.push_back(
      test::Spawn({"unshare", "-m", "sh", "-c", script, dir_, test::FixturePath("op_storm"), libtorch}, dir_ + "/out"));
  ASSERT_TRUE(test::WaitForFile(dir_ + "/pid", 60)) << test::ReadFile(dir_ + "/out");
  uint32_t pid = static_cast<uint32_t>(std::stoul(test::ReadFile(dir_ + "/pid")));
  spawned_.push_back(static_cast<pid_t>(pid));
  StatusOr<MappedImage> image = FindMappedImage(pid, "libtorch_cpu.so");
  ASSERT_TRUE(image.ok()) << image.status().message();
  ASSERT_EQ(std::stoull(test::ReadFile(dir_ + "/inode")), image->mappings.front().inode)
      << "the two tmpfs gave different inode numbers: nothing to tell apart";
  EXPECT_EQ(test::ReadFile("/proc/" + std::to_string(pid) + "/root" + image->path), "other\n");
  EXPECT_TRUE(test::ReadFile(image->host_path) == test::ReadFile(libtorch))
      << image->host_path << " is not the file mapped";
}

TEST_F(ProcRootTest, AGoneProcessLibraryIsNotReadFromAnotherFileAtItsPath) {
  // op_storm and the fake libtorch in a folder; once it has exited, another
  // library (the fake libc10, a function where libtorch has linear::call)
  // takes the path.
  for (const char* file : {"op_storm", "libtorch_cpu.so"})
    ASSERT_EQ(test::RunCommand({"cp", test::FixturePath(file), dir_ + "/"}).exit_code, 0) << file;
  pid_t pid = test::Spawn({dir_ + "/op_storm", "4000000000"}, dir_ + "/out");
  spawned_.push_back(pid);
  uint32_t target = static_cast<uint32_t>(pid);
  ASSERT_TRUE(test::WaitUntil([&] { return FindMappedImage(target, "libtorch_cpu.so").ok(); }, 60));
  StatusOr<RemoteFunction> linear = FindRemoteFunction(target, "libtorch_cpu.so", "_ZN2at4_ops6linear4callEl");
  ASSERT_TRUE(linear.ok()) << linear.status().message();
  AddressSymbols alive;
  EXPECT_EQ(alive.Name(target, linear->address), "at::_ops::linear::call(long)");

  AddressSymbols symbols;
  symbols.Remember(target);  // at attach: its addresses can be named after it exits
  kill(pid, SIGKILL);
  test::Wait(pid);
  std::erase(spawned_, pid);
  ASSERT_EQ(test::RunCommand({"cp", test::FixturePath("cudamem/libc10.so"), dir_ + "/replacement"}).exit_code, 0);
  ASSERT_EQ(rename((dir_ + "/replacement").c_str(), (dir_ + "/libtorch_cpu.so").c_str()), 0);
  EXPECT_EQ(symbols.Name(target, linear->address), "") << "read from the file now at its path";
}

}  // namespace
}  // namespace torchprobe
