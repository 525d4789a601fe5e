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
#include "userspace/base/proc_maps.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/op_probes.h"
#include "userspace/discover/op_symbols.h"
#include "userspace/discover/schema_format.h"
#include "userspace/discover/tensor_args.h"
#include "userspace/discover/tensor_layout.h"

namespace torchprobe {
namespace {

// "r1" register rsi, "s16" rsp + 16, "?" not known.
std::vector<std::string> Places(std::string_view params, std::string_view returns) {
  std::optional<std::vector<TensorArgPlace>> places = TensorArgPlaces(params, returns);
  EXPECT_TRUE(places) << params;
  std::vector<std::string> text;
  for (const TensorArgPlace& p : places.value_or(std::vector<TensorArgPlace>{}))
    text.push_back(p.kind == TensorArgPlace::kRegister ? "r" + std::to_string(p.where)
                   : p.kind == TensorArgPlace::kStack  ? "s" + std::to_string(p.where)
                                                       : "?");
  return text;
}

using Texts = std::vector<std::string>;

TEST(TensorArgsTest, AReturnedTensorShiftsTheArgumentsByOneRegister) {
  // add.Tensor returns a Tensor by value (hidden pointer in rdi); add_ a
  // Tensor& (both seen so in gdb on 1.13: rsi and rdx hold self and other).
  EXPECT_EQ(Places("(at::Tensor const&, at::Tensor const&, c10::Scalar const&)", "Tensor"), (Texts{"r1", "r2"}));
  EXPECT_EQ(Places("(at::Tensor&, at::Tensor const&, c10::Scalar const&)", "Tensor(a!)"), (Texts{"r0", "r1"}));
  EXPECT_EQ(Places("(at::Tensor const&, at::Tensor const&)", "()"), (Texts{"r0", "r1"}));
  EXPECT_EQ(Places("()", "Tensor"), Texts{});
}

TEST(TensorArgsTest, RegistersTakenByEachKindOfParameter) {
  // ArrayRef: two registers; double: an xmm register, none of the six.
  EXPECT_EQ(Places("(c10::ArrayRef<long>, at::Tensor const&, double, at::Tensor const&)", "Tensor"),
            (Texts{"r3", "r4"}));
  // optional<long>: two; optional<double>: one and an xmm; SymInt: by reference.
  EXPECT_EQ(Places("(std::optional<long>, std::optional<double>, c10::SymInt, at::Tensor const&)", "()"),
            Texts{"r4"});
  EXPECT_EQ(PassingOf("std::optional<c10::ArrayRef<double> >")->memory_bytes, 24);
  EXPECT_EQ(PassingOf("std::basic_string_view<char, std::char_traits<char> >")->integer_registers, 2);
  EXPECT_EQ(PassingOf("c10::optional<c10::ScalarType>")->integer_registers, 1);
  EXPECT_FALSE(PassingOf("c10::SomethingNew"));
}

TEST(TensorArgsTest, PastSixRegistersTensorsAreOnTheStackInOrder) {
  // Four longs, then an ArrayRef that still fits (r8, r9): the Tensors go on the stack.
  EXPECT_EQ(Places("(long, long, long, long, c10::ArrayRef<long>, at::Tensor const&, at::Tensor&)", "()"),
            (Texts{"s8", "s16"}));
  // Five longs: the ArrayRef does not fit and goes whole on the stack (16
  // bytes); the Tensor takes r9, the next one lies past the ArrayRef.
  EXPECT_EQ(Places("(long, long, long, long, long, c10::ArrayRef<long>, at::Tensor const&, at::Tensor&)", "()"),
            (Texts{"r5", "s24"}));
  // A 24-byte optional is in memory whatever registers are left.
  EXPECT_EQ(Places("(std::optional<c10::ArrayRef<double> >, at::Tensor const&)", "()"), Texts{"r0"});
  EXPECT_EQ(Places("(long, long, long, long, long, long, std::optional<c10::ArrayRef<double> >, at::Tensor&)", "()"),
            Texts{"s32"});
  // 1.13's OptionalArrayRef: its size is not checked, so no place after it is trusted.
  EXPECT_EQ(Places("(at::Tensor const&, c10::OptionalArrayRef<long>, at::Tensor const&)", "Tensor"),
            (Texts{"r1", "?"}));
  EXPECT_FALSE(TensorArgPlaces("at::Tensor const&", "Tensor")) << "not a parameter list";
}

TEST(TensorArgsTest, WhichReturnsComeThroughMemory) {
  for (const char* memory : {"Tensor", "Tensor(a)", "(Tensor values, Tensor indices)", "Tensor[]", "Scalar",
                             "SymInt", "str", "(Tensor(a!), Tensor(b!), Tensor(c!))"})
    EXPECT_TRUE(ReturnsThroughMemory(memory)) << memory;
  for (const char* registers : {"()", "", "Tensor(a!)", "int", "bool", "float", "ScalarType",
                                "(Tensor(a!) values, Tensor(b!) indices)"})
    EXPECT_FALSE(ReturnsThroughMemory(registers)) << registers;
}

// Every at::_ops::*::call of a real libtorch: each signature's parameters are
// placed, and nearly every Tensor argument has a known place at entry.
void ExpectTensorArgsPlaced(const std::string& libtorch) {
  StatusOr<OpProbeSet> probes = FindOpProbes(libtorch);
  ASSERT_TRUE(probes.ok()) << probes.status().message();
  size_t ops = 0, tensors = 0, in_registers = 0, on_stack = 0;
  for (const OpProbe& probe : probes->probes) {
    if (probe.boxed || probe.collective_layout || probe.op.schema.empty()) continue;
    std::optional<std::string> params = CallParamList(probe.symbol.c_str());
    std::string_view text = probe.op.schema;  // "aten::add.Tensor(...) -> Tensor": without the namespace
    std::optional<SchemaText> schema = SplitSchema(text.substr(text.find("::") + 2));
    ASSERT_TRUE(params && schema) << probe.symbol;
    std::optional<std::vector<TensorArgPlace>> places = TensorArgPlaces(*params, schema->returns);
    ASSERT_TRUE(places) << *params;
    ++ops;
    tensors += places->size();
    for (const TensorArgPlace& p : *places) {
      in_registers += p.kind == TensorArgPlace::kRegister;
      on_stack += p.kind == TensorArgPlace::kStack;
    }
  }
  std::printf("  %s: %zu ops, %zu Tensor arguments: %zu in registers, %zu on the stack at entry\n",
              libtorch.c_str(), ops, tensors, in_registers, on_stack);
  EXPECT_GT(ops, 1000u);
  EXPECT_GE(in_registers + on_stack, tensors * 98 / 100);
}

TEST(TensorArgsTest, NearlyEveryTensorArgumentOfPyTorch113And26IsPlaced) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string script = "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib', "
                       "'libtorch_cpu.so'))";
  std::string host = test::RunCommand({test::Python(), "-c", script}).out;
  ExpectTensorArgsPlaced(host.substr(0, host.find('\n')));
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  ExpectTensorArgsPlaced(root + "/usr/lib/python3/dist-packages/torch/lib/libtorch_cpu.so");
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
  uint64_t data;
  uint32_t version;
  size_t checked = 0;
  auto csv = [](const std::vector<int64_t>& xs) {
    std::string s;
    for (int64_t x : xs) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s.empty() ? std::string("-") : s;
  };
  while (layout && lines >> word >> impl >> dtype >> sizes >> strides >> offset >> numel >> data >> version) {
    std::optional<TensorMeta> meta = ReadTensorMeta(target, impl, *layout);
    ASSERT_TRUE(meta) << "tensor " << sizes;
    EXPECT_EQ(csv(meta->sizes), sizes);
    EXPECT_EQ(csv(meta->strides), strides) << sizes;
    EXPECT_EQ(meta->storage_offset, offset) << sizes;
    EXPECT_EQ(meta->numel, numel) << sizes;
    EXPECT_EQ(meta->dtype, dtype) << sizes;
    EXPECT_EQ(meta->storage_data, data) << sizes;
    EXPECT_EQ(meta->version, version) << sizes;
    ++checked;
  }
  test::WriteFile(stop, "");
  test::Wait(target);
  ASSERT_TRUE(up) << printed;
  ASSERT_TRUE(libc10.ok()) << libc10.status().message();
  ASSERT_TRUE(layout) << "no layout from " << libc10->host_path;
  EXPECT_EQ(checked, 8u) << printed;
}

TEST(TensorLayoutTest, LiveTensorsOfPyTorch113And26ReadAsPythonSeesThem) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string missing =
      test::WithReadyStopScript(test::Fixture("tensor_shapes.py"), "tensor-layout", ExpectLiveTensorsRead);
  if (!missing.empty()) GTEST_SKIP() << "1.13 only: " << missing;
}

}  // namespace
}  // namespace torchprobe
