// From an at::_ops struct name to PyTorch's operator name, overload and
// schema. The struct name alone is ambiguous ("sum_dim_IntList" is sum +
// dim_IntList, not sum_dim + IntList), so the answer comes from strings
// libtorch carries, in order of exactness:
//   1. the struct's own constexpr members name / overload_name / schema_str,
//      when the build exported them as data symbols;
//   2. a read-only string that begins with "<name>[.<overload>](" and whose
//      argument kinds match the C++ signature of `call`;
//   3. the same inside longer strings (the linker's tail merging), the text
//      seen in the most places winning.
// What none of these resolves keeps a best-guess name and no schema.
#ifndef TORCHPROBE_DISCOVER_OP_NAMES_H
#define TORCHPROBE_DISCOVER_OP_NAMES_H

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/base/op_table.h"
#include "userspace/discover/op_symbols.h"
#include "userspace/discover/schema_strings.h"

namespace torchprobe {

// The struct's constexpr strings, read through its data symbols.
struct OpConstants {
  std::optional<std::string> name;           // "aten::sum"
  std::optional<std::string> overload_name;  // "dim_IntList"
  std::optional<std::string> schema_str;     // "sum.dim_IntList(Tensor self, ...) -> Tensor"
};

// Source 1; nullopt without a schema_str.
std::optional<OpInfo> ResolveFromConstants(const OpConstants& constants);

// Sources 2 and 3. `call_kinds` filters out schemas of other ops that share
// the key (nullopt: no filter).
std::optional<OpInfo> ResolveFromSchemaStrings(std::string_view struct_name,
                                               const std::optional<std::vector<ArgKind>>& call_kinds,
                                               const SchemaStringIndex& index);

// For an unresolved struct: the longest split whose name is a known op
// ("aten::sum" for "sum_foo"), else "<x>_out" -> x/out, else the whole name.
OpInfo GuessOpInfo(std::string_view struct_name, const std::set<std::string>& known_names);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_OP_NAMES_H
