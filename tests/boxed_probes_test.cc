// The boxed probe set's discovery: the walk that tells a copy of
// Dispatcher::callBoxed by its arguments, on hand-assembled code, and the
// copies found in Debian's real libtorch 1.13 and in the 2.6 root's.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "tests/test_support.h"
#include "userspace/discover/boxed_probes.h"
#include "userspace/discover/op_probes.h"
#include "userspace/discover/probe_entry.h"
#include "userspace/discover/return_sites.h"

namespace torchprobe {
namespace {

std::unique_ptr<ReturnSiteFinder> Walker() {
  StatusOr<std::unique_ptr<ReturnSiteFinder>> walker = ReturnSiteFinder::Create();
  EXPECT_TRUE(walker.ok());
  return walker.ok() ? std::move(*walker) : nullptr;
}

const std::string kSpill("\x48\x89\x7c\x24\x08", 5);     // mov %rdi,0x8(%rsp)
const std::string kSaveStack("\x48\x89\xf5", 3);         // mov %rsi,%rbp
const std::string kCall("\xe8\x00\x00\x00\x00", 5);      // call (clobbers rdi, rsi, rcx...)
const std::string kReload("\x48\x8b\x74\x24\x08", 5);    // mov 0x8(%rsp),%rsi
const std::string kStackToRcx("\x48\x89\xe9", 3);        // mov %rbp,%rcx
const std::string kRbxToRcx("\x48\x89\xd9", 3);          // mov %rbx,%rcx
const std::string kKernelCall("\x41\xff\x57\x08", 4);    // call *0x8(%r15)
const std::string kRet("\xc3", 1);

TEST(BoxedProbesTest, HandleAndStackFollowedThroughSpillsAndCalls) {
  auto walker = Walker();
  ASSERT_NE(walker, nullptr);
  std::string code = kSpill + kSaveStack + kCall + kReload + kStackToRcx + kKernelCall + kRet;
  std::optional<BoxedCall> found = AnalyzeBoxedCall(*walker, code, 0x1000);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->handle_offset, 0u);
}

TEST(BoxedProbesTest, HandleAsAMemberOfTheFirstArgument) {
  auto walker = Walker();
  ASSERT_NE(walker, nullptr);
  const std::string lea("\x48\x8d\x77\x10", 4);  // lea 0x10(%rdi),%rsi
  const std::string call_rax("\xff\xd0", 2);     // call *%rax
  std::optional<BoxedCall> found =
      AnalyzeBoxedCall(*walker, kSaveStack + lea + kStackToRcx + call_rax + kRet, 0x1000);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->handle_offset, 16u);
}

TEST(BoxedProbesTest, OtherArgumentsAreNotABoxedCall) {
  auto walker = Walker();
  ASSERT_NE(walker, nullptr);
  // The stack slot is the handle, but rcx is not the second argument.
  EXPECT_FALSE(AnalyzeBoxedCall(*walker, kSpill + kReload + kRbxToRcx + kKernelCall + kRet, 0x1000));
  // The arguments did not survive a call in caller-saved registers.
  const std::string rdi_to_rsi("\x48\x89\xfe", 3);  // mov %rdi,%rsi
  const std::string rsi_to_rcx("\x48\x89\xf1", 3);  // mov %rsi,%rcx
  EXPECT_FALSE(AnalyzeBoxedCall(*walker, rsi_to_rcx + kCall + rdi_to_rsi + kKernelCall + kRet, 0x1000));
}

TEST(BoxedProbesTest, EntrySkipsEndbr64OnlyBeforeAPush) {
  EXPECT_EQ(EntrySkip(std::string("\xf3\x0f\x1e\xfa\x55", 5)), 4u);          // push %rbp
  EXPECT_EQ(EntrySkip(std::string("\xf3\x0f\x1e\xfa\x41\x57", 6)), 4u);      // push %r15
  EXPECT_EQ(EntrySkip(std::string("\xf3\x0f\x1e\xfa\xe9\x00\x00\x00\x00", 9)), 0u);  // jmp
  EXPECT_EQ(EntrySkip(std::string("\x55\x48\x89\xe5", 4)), 0u);              // no endbr64
}

// Every copy found is a probe whose op is read at run time, with returns.
void ExpectCopies(const std::string& libtorch, size_t expected) {
  StatusOr<OpProbeSet> set = FindOpProbes(libtorch);
  ASSERT_TRUE(set.ok()) << set.status().message();
  size_t boxed = 0;
  std::set<uint64_t> entries;
  for (const OpProbe& probe : set->probes) {
    if (!probe.boxed) continue;
    ++boxed;
    EXPECT_TRUE(entries.insert(probe.file_offset).second) << probe.symbol;
    EXPECT_FALSE(probe.return_offsets.empty()) << probe.symbol;
    EXPECT_LT(probe.handle_offset, 64u) << probe.symbol;
  }
  EXPECT_EQ(boxed, expected) << libtorch;
  EXPECT_EQ(set->boxed, expected);
}

TEST(BoxedProbesTest, CopiesInDebianLibtorch113) {
  const std::string lib = "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0";
  if (!test::FileExists(lib)) GTEST_SKIP() << lib << " not installed (python3-torch)";
  ExpectCopies(lib, 13);
}

TEST(BoxedProbesTest, CopiesInTheTorch2Root) {
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  ExpectCopies(root + "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.2.6.0", 12);
}

}  // namespace
}  // namespace torchprobe
