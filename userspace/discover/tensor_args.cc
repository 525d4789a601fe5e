// Register places of an op's Tensor arguments (x86-64 System V); see the header.
#include "userspace/discover/tensor_args.h"

#include <string>

#include "userspace/discover/op_symbols.h"

namespace torchprobe {

namespace {

constexpr int kIntegerRegisters = 6;  // rdi, rsi, rdx, rcx, r8, r9

bool IsStringView(std::string_view t) {
  return t == "c10::string_view" || t.starts_with("c10::basic_string_view<") ||
         t.starts_with("std::basic_string_view<") || t == "std::string_view";
}

// One byte to eight, trivially copyable: one integer register.
bool IsSmallScalar(std::string_view t) {
  for (std::string_view s : {"bool", "long", "int", "signed char", "unsigned char", "short", "c10::ScalarType",
                             "c10::Layout", "c10::MemoryFormat", "c10::Device", "at::Dimname", "c10::QScheme"})
    if (t == s) return true;
  return t.starts_with("std::array<bool,");
}

// Non-trivially copyable: passed by an invisible reference, one register.
bool IsByInvisibleReference(std::string_view t) {
  return t == "c10::SymInt" || t == "c10::Storage" || t == "at::Generator";
}

// The T of c10::optional<T> / std::optional<T>, or "" if `t` is not one.
std::string_view OptionalOf(std::string_view t) {
  for (std::string_view prefix : {"c10::optional<", "std::optional<"}) {
    if (t.starts_with(prefix) && t.ends_with(">")) {
      std::string_view inner = t.substr(prefix.size(), t.size() - prefix.size() - 1);
      while (!inner.empty() && inner.back() == ' ') inner.remove_suffix(1);
      return inner;
    }
  }
  return {};
}

}  // namespace

std::optional<int> IntegerRegistersOf(std::string_view t) {
  if (t.ends_with("&") || t.ends_with("*")) return 1;
  if (t == "double" || t == "float") return 0;  // an xmm register
  if (t.starts_with("c10::ArrayRef<") || IsStringView(t) || t == "c10::Stream") return 2;
  if (IsSmallScalar(t) || IsByInvisibleReference(t)) return 1;
  std::string_view inner = OptionalOf(t);
  bool std_optional = t.starts_with("std::");
  if (t.starts_with("c10::OptionalArrayRef<")) {
    // 2.x: a std::optional<ArrayRef> inside, 24 bytes: in memory. 1.13's
    // c10::optional<ArrayRef> may be 16 (unchecked): not known.
    return std::nullopt;
  }
  if (inner.empty()) return std::nullopt;
  if (inner == "long") return 2;          // value, flag: two eightbytes
  if (inner == "double") return 1;        // one xmm, the flag's eightbyte
  if (IsSmallScalar(inner)) return 1;     // both fit one eightbyte
  if (IsByInvisibleReference(inner)) return 1;
  if (std_optional && (inner.starts_with("c10::ArrayRef<") || IsStringView(inner))) return 0;  // 24 bytes
  return std::nullopt;
}

bool ReturnsThroughMemory(std::string_view returns) {
  while (!returns.empty() && returns.front() == ' ') returns.remove_prefix(1);
  while (!returns.empty() && returns.back() == ' ') returns.remove_suffix(1);
  if (returns.empty() || returns == "()") return false;
  if (returns.front() == '(') {
    // A tuple: of <= 2 references (all `(x!)`) it is 16 trivially copyable
    // bytes in rax:rdx; anything else (Tensors by value, 3 and more) in memory.
    size_t elements = 1, mutable_refs = 0;
    for (char c : returns) elements += c == ',';
    for (size_t at = returns.find("!)"); at != std::string_view::npos; at = returns.find("!)", at + 1))
      ++mutable_refs;
    return !(elements <= 2 && mutable_refs == elements);
  }
  std::string_view type = returns.substr(0, returns.find(' '));  // "Tensor(a!) out" -> "Tensor(a!)"
  if (type.ends_with("!)")) return false;                         // Tensor& in rax
  if (type.find('[') != std::string_view::npos) return true;      // std::vector, c10::List
  // Tensor, Tensor(a), Scalar, SymInt, str (and their optionals): non-trivial.
  std::string_view bare = type.substr(0, type.find_first_of("(?"));
  return bare == "Tensor" || bare == "Scalar" || bare == "SymInt" || bare == "str";
}

std::optional<std::vector<int>> TensorArgRegisters(std::string_view params, std::string_view returns) {
  std::optional<std::vector<std::string_view>> parts = SplitParamList(params);
  if (!parts) return std::nullopt;
  std::vector<int> tensors;
  int next = ReturnsThroughMemory(returns) ? 1 : 0;
  bool lost = false;  // a parameter of unknown size: the places after it are not known
  for (std::string_view part : *parts) {
    bool tensor = part == "at::Tensor const&" || part == "at::Tensor&";
    std::optional<int> regs = IntegerRegistersOf(part);
    if (!regs) lost = true;
    if (tensor) tensors.push_back(!lost && next < kIntegerRegisters ? next : kTensorOnStack);
    // One that does not fit whole goes on the stack; the next may still fit.
    if (regs && next + *regs <= kIntegerRegisters) next += *regs;
  }
  return tensors;
}

}  // namespace torchprobe
