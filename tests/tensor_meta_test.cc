// Tensor metadata's first steps: where an op's Tensor arguments are at its
// entry (x86-64 ABI, from the demangled signature and the schema's returns),
// and TensorImpl's field offsets derived from libc10, checked by reading live
// tensors of PyTorch 1.13 and 2.6 from outside the process.
#include <signal.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/proc_maps.h"
#include "userspace/discover/tensor_args.h"
#include "userspace/discover/tensor_layout.h"

namespace torchprobe {
namespace {

std::vector<int> Registers(std::string_view params, std::string_view returns) {
  std::optional<std::vector<int>> regs = TensorArgRegisters(params, returns);
  EXPECT_TRUE(regs) << params;
  return regs.value_or(std::vector<int>{-99});
}

TEST(TensorArgsTest, AReturnedTensorShiftsTheArgumentsByOneRegister) {
  // add.Tensor returns a Tensor by value (hidden pointer in rdi); add_ a Tensor&.
  EXPECT_EQ(Registers("(at::Tensor const&, at::Tensor const&, c10::Scalar const&)", "Tensor"),
            (std::vector<int>{1, 2}));
  EXPECT_EQ(Registers("(at::Tensor&, at::Tensor const&, c10::Scalar const&)", "Tensor(a!)"),
            (std::vector<int>{0, 1}));
  EXPECT_EQ(Registers("(at::Tensor const&, at::Tensor const&)", "()"), (std::vector<int>{0, 1}));
  EXPECT_EQ(Registers("()", "Tensor"), std::vector<int>{});
}

TEST(TensorArgsTest, RegistersTakenByEachKindOfParameter) {
  // ArrayRef: two registers; double: an xmm register, none of the six.
  EXPECT_EQ(Registers("(c10::ArrayRef<long>, at::Tensor const&, double, at::Tensor const&)", "Tensor"),
            (std::vector<int>{3, 4}));
  // optional<long>: two; optional<double>: one (its flag); SymInt: by reference.
  EXPECT_EQ(Registers("(std::optional<long>, std::optional<double>, c10::SymInt, at::Tensor const&)", "()"),
            std::vector<int>{4});
  // 2.x's OptionalArrayRef is 24 bytes: on the stack, no register.
  EXPECT_EQ(IntegerRegistersOf("std::optional<c10::ArrayRef<double> >"), 0);
  EXPECT_EQ(IntegerRegistersOf("std::basic_string_view<char, std::char_traits<char> >"), 2);
  EXPECT_EQ(IntegerRegistersOf("c10::optional<c10::ScalarType>"), 1);
  EXPECT_FALSE(IntegerRegistersOf("c10::SomethingNew"));
}

TEST(TensorArgsTest, PastSixRegistersOrAnUnknownSizeATensorIsNotRead) {
  // Four longs, then an ArrayRef that still fits (r8, r9): the Tensor is on the stack.
  EXPECT_EQ(Registers("(long, long, long, long, c10::ArrayRef<long>, at::Tensor const&)", "()"),
            std::vector<int>{kTensorOnStack});
  // Five longs: the ArrayRef does not fit and goes whole on the stack; the Tensor takes r9.
  EXPECT_EQ(Registers("(long, long, long, long, long, c10::ArrayRef<long>, at::Tensor const&)", "()"),
            std::vector<int>{5});
  // 1.13's OptionalArrayRef: its size is not checked, so no place after it is trusted.
  EXPECT_EQ(Registers("(at::Tensor const&, c10::OptionalArrayRef<long>, at::Tensor const&)", "Tensor"),
            (std::vector<int>{1, kTensorOnStack}));
  EXPECT_FALSE(TensorArgRegisters("at::Tensor const&", "Tensor")) << "not a parameter list";
}

TEST(TensorArgsTest, WhichReturnsComeThroughMemory) {
  for (const char* memory : {"Tensor", "Tensor(a)", "(Tensor values, Tensor indices)", "Tensor[]", "Scalar",
                             "SymInt", "str", "(Tensor(a!), Tensor(b!), Tensor(c!))"})
    EXPECT_TRUE(ReturnsThroughMemory(memory)) << memory;
  for (const char* registers : {"()", "", "Tensor(a!)", "int", "bool", "float", "ScalarType",
                                "(Tensor(a!) values, Tensor(b!) indices)"})
    EXPECT_FALSE(ReturnsThroughMemory(registers)) << registers;
}

TEST(TensorLayoutTest, SizesAndStridesFoundInDimCustomsReturn) {
  // 2.6's fast path: mov 0x40(%rdi),%rax; pop %rbx; ret (after an extra-meta path).
  std::string code = "\xf3\x0f\x1e\xfa\x53\x48\x8b\x47\x28\x5b\x8b\x40\x08\xc3\x48\x8b\x47\x40\x5b\xc3";
  std::optional<TensorLayout> layout = LayoutFromDimCustom(code);
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->sizes_and_strides, 0x40u);
  EXPECT_EQ(layout->storage_offset, 0x40u + 88);
  EXPECT_EQ(layout->dtype, 0x40u + 104);
  EXPECT_FALSE(LayoutFromDimCustom("\x48\x8b\x47\x40\x5d\xc3"));
  EXPECT_EQ(ScalarTypeName(6), "float");
  EXPECT_EQ(ScalarTypeName(4), "long int");
  EXPECT_EQ(ScalarTypeName(200), "");
}

std::string ShapesScript() {
  std::string script = test::TrainScript();
  return script.replace(script.rfind("train.py"), 8, "tensor_shapes.py");
}

// Spawns tensor_shapes.py (argv from `python`), derives the layout from the
// libc10 it maps and reads every tensor it printed: all as Python says.
void ExpectLiveTensorsRead(const std::vector<std::string>& argv, const std::string& ready,
                           const std::string& stop, const std::string& out) {
  pid_t target = test::Spawn(argv, out);
  bool up = test::WaitForFile(ready, 120);
  std::string printed = test::ReadFile(out);
  std::optional<TensorLayout> layout;
  StatusOr<MappedImage> libc10 = FindMappedImage(static_cast<uint32_t>(target), "libc10.so");
  if (up && libc10.ok()) {
    StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(libc10->host_path);
    if (image.ok()) layout = DeriveTensorLayout(**image);
  }
  std::istringstream lines(printed);
  std::string word, sizes, strides;
  uint64_t impl;
  int dtype;
  int64_t offset, numel;
  size_t checked = 0;
  auto csv = [](const std::vector<int64_t>& xs) {
    std::string s;
    for (int64_t x : xs) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s.empty() ? std::string("-") : s;
  };
  while (layout && lines >> word >> impl >> dtype >> sizes >> strides >> offset >> numel) {
    std::optional<TensorMeta> meta = ReadTensorMeta(target, impl, *layout);
    ASSERT_TRUE(meta) << "tensor " << sizes;
    EXPECT_EQ(csv(meta->sizes), sizes);
    EXPECT_EQ(csv(meta->strides), strides) << sizes;
    EXPECT_EQ(meta->storage_offset, offset) << sizes;
    EXPECT_EQ(meta->numel, numel) << sizes;
    EXPECT_EQ(meta->dtype, dtype) << sizes;
    ++checked;
  }
  test::WriteFile(stop, "");
  test::Wait(target);
  ASSERT_TRUE(up) << printed;
  ASSERT_TRUE(libc10.ok()) << libc10.status().message();
  ASSERT_TRUE(layout) << "no layout from " << libc10->host_path;
  EXPECT_EQ(checked, 8u) << printed;
}

TEST(TensorLayoutTest, LiveTensorsOfPyTorch113ReadAsPythonSeesThem) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string dir = test::MakeTempDir();
  ExpectLiveTensorsRead({test::Python(), ShapesScript(), dir + "/ready",
                         dir + "/stop"},
                        dir + "/ready", dir + "/stop", dir + "/out");
  test::RemoveTempDir(dir);
}

TEST(TensorLayoutTest, LiveTensorsOfPyTorch26ReadAsPythonSeesThem) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (process_vm_readv of another user's process)";
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  std::string name = "/tmp/torchprobe-tensor-layout-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", ShapesScript(), root + name + ".py"})
                .exit_code,
            0);
  std::string dir = test::MakeTempDir();
  ExpectLiveTensorsRead(test::Torch2Python(root, name + ".py", {name + ".ready", name + ".stop"}),
                        root + name + ".ready", root + name + ".stop", dir + "/out");
  for (const char* suffix : {".py", ".ready", ".stop"}) unlink((root + name + suffix).c_str());
  test::RemoveTempDir(dir);
}

}  // namespace
}  // namespace torchprobe
