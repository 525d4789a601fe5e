// Operator schema text as PyTorch prints it. libtorch carries each schema
// as written in native_functions.yaml ("sum.dim_IntList(Tensor self, ...)"),
// but torch.profiler, the execution trace and torch._C print the parsed
// c10::FunctionSchema back (operator<<), which differs in small ways:
// Dimname is printed as str, defaults are printed from their IValue
// (float 1e-05 -> 1.0000000000000001e-05, 1.0 -> 1., reduction=Mean -> 1,
// int[1] padding=0 -> [0], 'single' -> "double" quotes). This file parses
// the source text and prints it the way users will see it elsewhere.
#ifndef TORCHPROBE_DISCOVER_SCHEMA_FORMAT_H
#define TORCHPROBE_DISCOVER_SCHEMA_FORMAT_H

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/discover/op_symbols.h"

namespace torchprobe {

// A schema split at its top level, text untouched.
struct SchemaText {
  std::string_view key;        // "sum.dim_IntList" (name[.overload], no namespace)
  std::vector<std::string_view> args;  // "Tensor self", "*", "bool keepdim=False"
  std::string_view returns;    // "Tensor", "(Tensor values, Tensor indices)"
};

// Splits "key(args) -> returns"; nullopt when the text is not a schema.
std::optional<SchemaText> SplitSchema(std::string_view text);

// The kinds of the arguments (the "*" marker is not an argument), to compare
// with the C++ signature of at::_ops::<op>::call.
std::vector<ArgKind> SchemaArgKinds(const SchemaText& schema);

// "aten::" + the schema printed as c10::FunctionSchema prints it; nullopt
// when the text cannot be split.
std::optional<std::string> FormatSchema(std::string_view ns, std::string_view text);

// The pieces, public for tests.
std::string FormatDouble(double value);           // IValue's way: 1. / 1.0000000000000001e-05
std::string QuoteString(std::string_view value);  // c10::printQuotedString
std::string FormatArgument(std::string_view arg); // one "Type name=default"

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_SCHEMA_FORMAT_H
