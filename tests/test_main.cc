// The test binary's main: GoogleTest, plus one closing line that states the
// counts in the plain form CI reads ("tests: N passed, N failed, N skipped"),
// so that no output of a test (a validator's own summary) can be taken for
// the suite's.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <cstdio>

namespace {

class CountLine : public ::testing::EmptyTestEventListener {
  void OnTestProgramEnd(const ::testing::UnitTest& unit) override {
    std::printf("tests: %d passed, %d failed, %d skipped\n", unit.successful_test_count(),
                unit.failed_test_count(), unit.skipped_test_count());
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Orphans of the tests (a keeper whose torchprobe exited, a launched
  // command whose torchprobe was killed) come to us, so tests can tell
  // their own processes from other runs' on the same host.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::testing::UnitTest::GetInstance()->listeners().Append(new CountLine);
  return RUN_ALL_TESTS();
}
