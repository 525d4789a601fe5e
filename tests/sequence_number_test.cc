// The autograd sequence number's TLS place, derived from libtorch's peek()
// and read from outside a live PyTorch 1.13 and 2.6 process: the number its
// profiler says the main thread's next grad_fn gets.
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/sequence_number.h"

namespace torchprobe {
namespace {

TEST(SequenceNumberTest, PeeksShapesOf113And26) {
  // 1.13: sub; data16 lea 0x100(%rip),%rdi; data16 data16 rex.W call; mov (%rax),%rax
  std::string v113("\x48\x83\xec\x08\x66\x48\x8d\x3d\x00\x01\x00\x00\x66\x66\x48\xe8\x00\x00\x00\x00\x48\x8b\x00",
                   23);
  std::optional<SequenceNumberTls> a = SequenceNumberTlsFromPeek(0x1000, v113);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->tls_index_vaddr, 0x1000u + 12 + 0x100);
  EXPECT_EQ(a->displacement, 0);
  // 2.6: endbr64; sub; lea -0x10(%rip),%rdi; call; mov 0x130(%rax),%rax
  std::string v26("\xf3\x0f\x1e\xfa\x48\x83\xec\x08\x48\x8d\x3d\xf0\xff\xff\xff\xe8\x00\x00\x00\x00"
                  "\x48\x8b\x80\x30\x01\x00\x00",
                  27);
  std::optional<SequenceNumberTls> b = SequenceNumberTlsFromPeek(0x2000, v26);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->tls_index_vaddr, 0x2000u + 15 - 0x10);
  EXPECT_EQ(b->displacement, 0x130);
  EXPECT_FALSE(SequenceNumberTlsFromPeek(0, std::string("\x48\x83\xec\x08\xc3", 5)));
}

// The thread's TLS pointer, as BPF reads it from its task: here by ptrace,
// the thread stopped for the moment of one read of its registers.
std::optional<uint64_t> FsBase(pid_t tid) {
  if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) return std::nullopt;
  ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
  int status = 0;
  waitpid(tid, &status, __WALL);
  user_regs_struct regs{};
  bool ok = ptrace(PTRACE_GETREGS, tid, nullptr, &regs) == 0;
  ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
  return ok ? std::optional<uint64_t>(regs.fs_base) : std::nullopt;
}

// Spawns sequence_number.py (`argv`), reads its main thread's number and
// compares it with what the script's profiler said.
void ExpectLiveSequenceNumber(const std::vector<std::string>& argv, const std::string& ready,
                              const std::string& stop, const std::string& out) {
  pid_t target = test::Spawn(argv, out);
  bool up = test::WaitForFile(ready, 120);
  std::optional<uint64_t> got;
  std::string why;
  StatusOr<MappedImage> libtorch = FindMappedImage(static_cast<uint32_t>(target), "libtorch_cpu.so");
  if (up && libtorch.ok()) {
    StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(libtorch->host_path);
    std::optional<SequenceNumberTls> where = image.ok() ? FindSequenceNumberTls(**image) : std::nullopt;
    std::optional<uint64_t> offset = where ? (*image)->FileOffset(where->tls_index_vaddr) : std::nullopt;
    uint64_t tls_index = 0;
    for (const MapEntry& m : libtorch->mappings)
      if (offset && *offset >= m.offset && *offset < m.offset + (m.end - m.start))
        tls_index = m.start + (*offset - m.offset);
    std::optional<uint64_t> fs_base = FsBase(target);
    if (tls_index && fs_base) got = ReadSequenceNumber(target, *fs_base, tls_index, *where);
    why = !where ? "no peek() shape" : !tls_index ? "tls_index not mapped" : !fs_base ? "no fs base" : "unreadable";
  }
  test::WriteFile(stop, "");
  test::Wait(target);
  ASSERT_TRUE(up);
  ASSERT_TRUE(libtorch.ok()) << libtorch.status().message();
  ASSERT_TRUE(got) << why;
  std::istringstream printed(test::ReadFile(out));
  std::string word;
  uint64_t want = 0;
  ASSERT_TRUE(printed >> word >> want) << test::ReadFile(out);
  EXPECT_EQ(*got, want);
}

TEST(SequenceNumberTest, ReadFromOutsideAPyTorch113And26Thread) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string missing =
      test::WithReadyStopScript(test::Fixture("sequence_number.py"), "seqnr", ExpectLiveSequenceNumber);
  if (!missing.empty()) GTEST_SKIP() << "1.13 only: " << missing;
}

}  // namespace
}  // namespace torchprobe
