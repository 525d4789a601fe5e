// A test fixture with its own temporary folder and a list of the processes
// it spawned: the processes are killed and the folder removed at its end,
// whatever it asserted.
#ifndef TORCHPROBE_TESTS_SCRATCH_TEST_H
#define TORCHPROBE_TESTS_SCRATCH_TEST_H

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "tests/test_support.h"

namespace torchprobe::test {

class ScratchTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override {
    for (pid_t pid : spawned_) {
      kill(pid, SIGKILL);
      Wait(pid);
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string dir_;
  std::vector<pid_t> spawned_;
};

}  // namespace torchprobe::test

#endif  // TORCHPROBE_TESTS_SCRATCH_TEST_H
