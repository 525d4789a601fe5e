// Where an op's Tensor arguments are at the entry of at::_ops::<op>::call,
// under the x86-64 System V ABI, so BPF can read their shapes there (the
// first step of tensor metadata; nothing reads them yet). A `const Tensor&`
// is a pointer in an integer register: rdi, rsi, rdx, rcx, r8, r9 in order,
// after a hidden result pointer in rdi when the op returns a Tensor (or a
// tuple, vector, Scalar, SymInt) by value. Arguments before it take 0
// (double: an xmm register), 1 or 2 (ArrayRef, optional<int64_t>,
// string_view) integer registers, or go in memory (> 16 bytes). One that no
// longer fits in registers goes whole on the stack, and the next ones may
// still take registers. Stack arguments lie in order above the return
// address, each a multiple of 8 bytes: at the entry, `rsp + 8` is the first.
// After a parameter whose size is not known here (1.13's
// c10::optional<ArrayRef>: 16 or 24 bytes, not checked) no place is trusted.
#ifndef TORCHPROBE_DISCOVER_TENSOR_ARGS_H
#define TORCHPROBE_DISCOVER_TENSOR_ARGS_H

#include <optional>
#include <string_view>
#include <vector>

namespace torchprobe {

// How one parameter of the demangled C++ signature is passed.
struct ParamPassing {
  int integer_registers = 0;  // "at::Tensor const&" 1, "c10::ArrayRef<long>" 2
  int sse_registers = 0;      // "double" 1
  int memory_bytes = 0;       // > 16 bytes: always on the stack, this size
};
// nullopt for a type not known here.
std::optional<ParamPassing> PassingOf(std::string_view cpp_type);

// True when a schema's returns ("Tensor", "Tensor(a!)", "(Tensor, Tensor)",
// "()") come back through a hidden pointer in rdi.
bool ReturnsThroughMemory(std::string_view schema_returns);

struct TensorArgPlace {
  enum Kind { kRegister, kStack, kUnknown } kind = kUnknown;
  int where = 0;  // kRegister: 0 = rdi ... 5 = r9; kStack: byte offset from rsp at entry
  uint32_t ref = 0;  // enum tp_tensor_ref: a Tensor, or an optional one (with_optionals)
  bool operator==(const TensorArgPlace&) const = default;
};

// For each `Tensor`-typed parameter (`at::Tensor const&`, `at::Tensor&`; with
// `with_optionals`, `c10::optional<at::Tensor> const&` and std::'s too), in
// order, where it is at entry. `params`: the demangled list,
// "(at::Tensor const&, c10::ArrayRef<long>)"; nullopt when it cannot be split.
std::optional<std::vector<TensorArgPlace>> TensorArgPlaces(std::string_view params, std::string_view schema_returns,
                                                           bool with_optionals = false);

// shapes_enter's Tensor places, packed (byte i is the op's
// tp_op_layout.tensor_places[i], bpf/events.h; no longer in the cookie): a
// byte per Tensor argument, the first TP_SHAPES_TENSORS in order: bits 0-5 0 not known, 1-6
// an integer register, 7-63 a stack slot (rsp + 8 * (code - 6)); bits 6-7
// the place's tp_tensor_ref.
uint32_t TensorPlaceCookie(const std::vector<TensorArgPlace>& places);
// The same for an at::_ops::<op>::call from its mangled symbol and its schema
// ("aten::add.Tensor(...) -> Tensor"), optional Tensors included; 0 when its
// places are not known.
uint32_t TensorPlaceCookieOf(const char* symbol, std::string_view schema);

// One argument of an op's schema, as far as reading its inputs goes.
struct SchemaArg {
  bool tensor = false;  // "Tensor", "Tensor(a!)", "Tensor?": an at::Tensor (or an optional
                        // one) the probes may read; not "Tensor[]"
  bool scalar = false;  // "Scalar"
  bool mutated = false; // a Tensor the op writes: its alias annotation has '!' ("Tensor(a!)")
};

// The arguments of a schema ("aten::add.Tensor(Tensor self, ...) -> Tensor"),
// their Tensors in the order TensorArgPlaces lists them; nullopt when it
// cannot be split.
std::optional<std::vector<SchemaArg>> SchemaArgsOf(std::string_view schema);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_TENSOR_ARGS_H
