// Reading at::_ops::<struct>::<member> out of mangled names. Every ATen
// operator overload has a struct in namespace at::_ops with a static
// `call` (the top-level dispatcher entry the profiler records), a
// `redispatch`, and the constexpr strings `name`, `overload_name` and
// `schema_str`. Only the struct name comes from the symbol; what PyTorch
// calls the op is resolved elsewhere (op_names.h).
#ifndef TORCHPROBE_DISCOVER_OP_SYMBOLS_H
#define TORCHPROBE_DISCOVER_OP_SYMBOLS_H

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torchprobe {

struct OpsSymbol {
  std::string_view struct_name;  // "sum_dim_IntList"
  std::string_view member;       // "call", "redispatch", "schema_str"...
};

// Parses "_ZN2at4_ops<len><struct><len><member>E..." and nothing deeper:
// a nested name (at::_ops::x::y::call), a local static (_ZZ...) or a
// compiler clone ("....cold", ".isra.0") is not an op entry point.
std::optional<OpsSymbol> ParseOpsSymbol(std::string_view mangled);

// True for at::_ops::<struct>::call, the function to probe.
bool IsOpCallSymbol(std::string_view mangled);

// Ways to read a struct name as name + "_" + overload, the whole name with
// no overload first: "add__Tensor" -> {add__Tensor,""}, {add,_Tensor},
// {add_,Tensor}. Both parts are non-empty in a split.
struct NameSplit {
  std::string name;
  std::string overload;
};
std::vector<NameSplit> CandidateSplits(std::string_view struct_name);

// The kind of a parameter, coarse enough to hold across PyTorch versions
// (c10::optional vs std::optional, SymInt or not): it tells a schema for
// "cos(Tensor self)" from "_foreach_cos(Tensor[] self)".
enum class ArgKind { kTensor, kTensorList, kOther };

// The parameter kinds of a mangled at::_ops::*::call, from its demangled
// signature; nullopt when it cannot be demangled.
std::optional<std::vector<ArgKind>> CallArgKinds(const char* mangled);
// The demangled parameter list of a mangled at::_ops::*::call,
// "(at::Tensor const&, long)"; nullopt when it cannot be demangled.
std::optional<std::string> CallParamList(const char* mangled);
// The parameters of a demangled list "(at::Tensor const&, long)", split at
// its top-level commas; nullopt when it is not parenthesized.
std::optional<std::vector<std::string_view>> SplitParamList(std::string_view demangled_params);
// Same, from a demangled parameter list "(at::Tensor const&, long)".
std::optional<std::vector<ArgKind>> ParamListKinds(std::string_view demangled_params);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_OP_SYMBOLS_H
