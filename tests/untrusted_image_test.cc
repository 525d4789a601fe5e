// ELF images that belong to someone else (issue 22): any process can map a
// file named libtorch_cpu.so and make root's torchprobe read it. A FIFO where
// a library should be must not block the open, a file cut short while mapped
// must not kill the reader (SIGBUS), and a string table without its NUL must
// not be read past. Each case runs in a child, so that the failure it guards
// against (a hang, a signal) fails the test, not the run.
#include <elf.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/discover/boxed_probes.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/op_probes.h"
#include "userspace/discover/return_sites.h"

namespace torchprobe {
namespace {

// `body`'s exit code, run in a child; 128 + N when signal N ended it (a
// blocked child ends by SIGALRM after 20 s).
int InChild(const std::function<int()>& body) {
  pid_t child = fork();
  if (child == 0) {
    alarm(20);
    _exit(body());
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A copy of the fake libtorch fixture (a small real ELF) in a temporary folder.
class UntrustedImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fixture_ = test::FixturePath("libtorch_cpu.so");
    if (!test::FileExists(fixture_)) GTEST_SKIP() << fixture_ << " not built";
    dir_ = test::MakeTempDir();
    image_ = dir_ + "/libtorch_cpu.so";
    test::WriteFile(image_, test::ReadFile(fixture_));
  }
  void TearDown() override {
    if (!dir_.empty()) test::RunCommand({"rm", "-rf", dir_});
  }
  std::string fixture_, dir_, image_;
};

TEST_F(UntrustedImageTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  std::string fifo = dir_ + "/libtorch_python.so";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(InChild([&] {
              StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(fifo);
              return !image.ok() && image.status().message().find("not a regular file") != std::string::npos ? 0 : 1;
            }),
            0);
}

// Every byte of the image, through the ways planners read it.
uint64_t TouchEverything(const ElfImage& image) {
  uint64_t sum = 0;
  for (const ElfSection& section : image.sections())
    for (char c : image.SectionBytes(section)) sum += static_cast<uint8_t>(c);
  for (const ElfSymbol& symbol : image.FunctionSymbols())
    for (char c : image.BytesAt(symbol.vaddr, symbol.size)) sum += static_cast<uint8_t>(c);
  return sum;
}

TEST_F(UntrustedImageTest, AFileCutShortWhileReadIsSaidNotASigbus) {
  EXPECT_EQ(InChild([&] {
              StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(image_);
              if (!image.ok() || !(*image)->Intact().ok()) return 2;
              if (truncate(image_.c_str(), 0) != 0) return 3;
              volatile uint64_t sum = TouchEverything(**image);
              (void)sum;
              return (*image)->Intact().ok() ? 4 : 0;
            }),
            0) << "128 + 7: killed by SIGBUS";
}

// The fixture with .dynstr moved onto a run of 'A's that ends the file, at a
// page boundary, with no NUL: every name .rela.plt points at runs off the end.
std::string UnterminatedDynstr(const std::string& elf) {
  std::string bytes = elf;
  Elf64_Ehdr ehdr;
  std::memcpy(&ehdr, bytes.data(), sizeof ehdr);
  auto shdr_at = [&](size_t i) { return ehdr.e_shoff + i * ehdr.e_shentsize; };
  Elf64_Shdr names;
  std::memcpy(&names, bytes.data() + shdr_at(ehdr.e_shstrndx), sizeof names);
  size_t start = bytes.size();
  size_t end = (start + 4096 + 4095) & ~size_t{4095};
  bytes.append(end - start, 'A');
  for (size_t i = 0; i < ehdr.e_shnum; ++i) {
    Elf64_Shdr shdr;
    std::memcpy(&shdr, bytes.data() + shdr_at(i), sizeof shdr);
    if (std::strcmp(bytes.data() + names.sh_offset + shdr.sh_name, ".dynstr") != 0) continue;
    shdr.sh_offset = start;
    shdr.sh_size = end - start;
    std::memcpy(bytes.data() + shdr_at(i), &shdr, sizeof shdr);
  }
  return bytes;
}

TEST_F(UntrustedImageTest, AnUnterminatedDynstrIsNotReadPast) {
  test::WriteFile(image_, UnterminatedDynstr(test::ReadFile(fixture_)));
  int code = InChild([&] {
    // A page nothing may touch right after the image's mapping: an N+1 page
    // hole whose last page stays reserved, which the next N-page mapping
    // (the image's) fills from its start.
    long page = sysconf(_SC_PAGESIZE);
    size_t size = static_cast<size_t>((test::ReadFile(image_).size() + page - 1) / page * page);
    char* hole = static_cast<char*>(mmap(nullptr, size + page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    munmap(hole, size);
    StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(image_);
    if (!image.ok()) return 2;
    if ((*image)->FileBytes(0, 1).data() != hole) return 3;
    StatusOr<std::unique_ptr<ReturnSiteFinder>> walker = ReturnSiteFinder::Create();
    if (!walker.ok()) return 2;
    OpProbeSet set;
    AppendBoxedProbes(**image, **walker, &set);
    return 0;
  });
  if (code == 3) GTEST_SKIP() << "the image was not mapped before a free page: the read past it cannot be seen";
  EXPECT_EQ(code, 0) << "128 + 11: killed by SIGSEGV";
}

}  // namespace
}  // namespace torchprobe
