// The quick BTF walk answers as libbpf's full parse does, and says when it
// cannot answer.
#include <bpf/btf.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "tests/scratch_test.h"
#include "userspace/attach/kernel_btf.h"

namespace torchprobe {
namespace {

TEST(KernelBtfTest, AgreesWithLibbpfOnTheRunningKernel) {
  btf* kernel = btf__load_vmlinux_btf();
  if (!kernel) GTEST_SKIP() << "no kernel BTF at /sys/kernel/btf/vmlinux";
  for (const char* name : {"bpf_send_signal_task", "bpf_task_acquire", "schedule", "do_exit",
                           "task_struct" /* a struct, not a function */, "torchprobe_no_such_function"}) {
    int expected = btf__find_by_name_kind(kernel, name, BTF_KIND_FUNC) > 0 ? 1 : 0;
    EXPECT_EQ(KernelBtfHasFunc(name), expected) << name;
  }
  EXPECT_EQ(KernelBtfHasFunc("schedule"), 1) << "every kernel with BTF has schedule()";
  btf__free(kernel);
}

// A BTF blob: header, then one type (kind, vlen, its trailer zeroed), then
// the strings.
std::string Blob(uint32_t kind, uint32_t vlen, size_t trailer, const std::string& name) {
  std::string types(12 + trailer, '\0'), strings = std::string(1, '\0') + name + '\0';
  uint32_t name_off = 1, info = (kind << 24) | vlen;
  std::memcpy(types.data(), &name_off, 4);
  std::memcpy(types.data() + 4, &info, 4);
  uint32_t header[6] = {0x0001eB9F, 24, 0, static_cast<uint32_t>(types.size()),
                        static_cast<uint32_t>(types.size()), static_cast<uint32_t>(strings.size())};
  std::string blob(reinterpret_cast<const char*>(header), sizeof header);
  return blob + types + strings;
}

class KernelBtfScratchTest : public test::ScratchTest {};

TEST_F(KernelBtfScratchTest, SaysWhenItCannotTell) {
  std::string path = dir_ + "/btf";
  test::WriteFile(path, Blob(12, 0, 0, "my_func"));
  EXPECT_EQ(KernelBtfHasFunc("my_func", path), 1);
  EXPECT_EQ(KernelBtfHasFunc("my_fun", path), 0) << "a prefix is not the name";
  test::WriteFile(path, Blob(4, 2, 24, "my_func"));  // a struct of that name, two members
  EXPECT_EQ(KernelBtfHasFunc("my_func", path), 0);
  test::WriteFile(path, Blob(31, 0, 0, "my_func"));  // a kind newer than the walk knows
  EXPECT_EQ(KernelBtfHasFunc("my_func", path), -1);
  std::string cut = Blob(4, 2, 24, "my_func");
  test::WriteFile(path, cut.substr(0, 40));  // cut inside its types
  EXPECT_EQ(KernelBtfHasFunc("my_func", path), -1);
  test::WriteFile(path, "not BTF at all, just some words");
  EXPECT_EQ(KernelBtfHasFunc("my_func", path), -1);
  EXPECT_EQ(KernelBtfHasFunc("my_func", dir_ + "/absent"), -1);
}

}  // namespace
}  // namespace torchprobe
