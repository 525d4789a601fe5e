// Where an op's Tensor arguments are at the entry of at::_ops::<op>::call,
// under the x86-64 System V ABI, so BPF can read their shapes there (the
// first step of tensor metadata; nothing reads them yet). A `const Tensor&`
// is a pointer in an integer register: rdi, rsi, rdx, rcx, r8, r9 in order,
// after a hidden result pointer in rdi when the op returns a Tensor (or a
// tuple, vector, Scalar, SymInt) by value. Arguments before it take 0
// (double: an xmm register; > 16 bytes: the stack), 1 or 2 (ArrayRef,
// optional<int64_t>, string_view) integer registers; one that no longer fits
// goes whole on the stack and the next ones still take registers. Past six,
// a Tensor is on the stack: reported as such, not read. So is every Tensor
// after a parameter whose size is not known here (c10::optional<ArrayRef>
// of 1.13: 16 or 24 bytes, not checked).
#ifndef TORCHPROBE_DISCOVER_TENSOR_ARGS_H
#define TORCHPROBE_DISCOVER_TENSOR_ARGS_H

#include <optional>
#include <string_view>
#include <vector>

namespace torchprobe {

inline constexpr int kTensorOnStack = -1;

// Integer registers one parameter of the demangled C++ signature takes
// ("at::Tensor const&" 1, "c10::ArrayRef<long>" 2, "double" 0, ...); nullopt
// for a type not known here.
std::optional<int> IntegerRegistersOf(std::string_view cpp_type);

// True when a schema's returns ("Tensor", "Tensor(a!)", "(Tensor, Tensor)",
// "()") come back through a hidden pointer in rdi.
bool ReturnsThroughMemory(std::string_view schema_returns);

// For each `Tensor`-typed parameter (`at::Tensor const&`, `at::Tensor&`), in
// order: its register index (0 = rdi ... 5 = r9) or kTensorOnStack.
// `params`: the demangled list, "(at::Tensor const&, c10::ArrayRef<long>)";
// nullopt when it cannot be split.
std::optional<std::vector<int>> TensorArgRegisters(std::string_view params, std::string_view schema_returns);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_TENSOR_ARGS_H
