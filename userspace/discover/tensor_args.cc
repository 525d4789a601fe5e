// Register places of an op's Tensor arguments (x86-64 System V); see the header.
#include "userspace/discover/tensor_args.h"

#include <string>

#include "bpf/events.h"
#include "userspace/discover/op_symbols.h"
#include "userspace/discover/schema_format.h"

namespace torchprobe {

namespace {

constexpr int kIntegerRegisters = 6;  // rdi, rsi, rdx, rcx, r8, r9
constexpr int kSseRegisters = 8;      // xmm0-7

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

std::optional<ParamPassing> PassingOf(std::string_view t) {
  auto integer = [](int n) { return ParamPassing{.integer_registers = n}; };
  if (t.ends_with("&") || t.ends_with("*")) return integer(1);
  if (t == "double" || t == "float") return ParamPassing{.sse_registers = 1};
  if (t.starts_with("c10::ArrayRef<") || IsStringView(t) || t == "c10::Stream") return integer(2);
  if (IsSmallScalar(t) || IsByInvisibleReference(t)) return integer(1);
  // 2.x's OptionalArrayRef holds a 24-byte std::optional<ArrayRef>; 1.13's a
  // c10::optional<ArrayRef> whose size is not checked here.
  if (t.starts_with("c10::OptionalArrayRef<")) return std::nullopt;
  std::string_view inner = OptionalOf(t);
  if (inner.empty()) return std::nullopt;
  if (inner == "long") return integer(2);                             // value, flag: two eightbytes
  if (inner == "double") return ParamPassing{.integer_registers = 1, .sse_registers = 1};
  if (IsSmallScalar(inner) || IsByInvisibleReference(inner)) return integer(1);
  if (t.starts_with("std::") && (inner.starts_with("c10::ArrayRef<") || IsStringView(inner)))
    return ParamPassing{.memory_bytes = 24};
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

namespace {

// The tp_tensor_ref of a Tensor parameter, or -1 for any other.
int TensorRefOf(std::string_view part, bool with_optionals) {
  if (part == "at::Tensor const&" || part == "at::Tensor&") return TENSOR_REF_PLAIN;
  if (!with_optionals) return -1;
  if (part == "c10::optional<at::Tensor> const&") return TENSOR_REF_C10_OPTIONAL;
  if (part == "std::optional<at::Tensor> const&") return TENSOR_REF_STD_OPTIONAL;
  return -1;
}

}  // namespace

std::optional<std::vector<TensorArgPlace>> TensorArgPlaces(std::string_view params, std::string_view returns,
                                                           bool with_optionals) {
  std::optional<std::vector<std::string_view>> parts = SplitParamList(params);
  if (!parts) return std::nullopt;
  std::vector<TensorArgPlace> tensors;
  int gp = ReturnsThroughMemory(returns) ? 1 : 0, sse = 0;
  int stack = 8;      // the first stack argument's offset from rsp: above the return address
  bool lost = false;  // a parameter of unknown size: the places after it are not known
  for (std::string_view part : *parts) {
    std::optional<ParamPassing> p = PassingOf(part);
    if (!p) lost = true;
    int ref = TensorRefOf(part, with_optionals);
    if (lost) {
      if (ref >= 0) tensors.push_back({});
      continue;
    }
    TensorArgPlace place;
    if (p->memory_bytes == 0 && gp + p->integer_registers <= kIntegerRegisters &&
        sse + p->sse_registers <= kSseRegisters) {
      place = {TensorArgPlace::kRegister, gp};
      gp += p->integer_registers;
      sse += p->sse_registers;
    } else {  // whole on the stack
      place = {TensorArgPlace::kStack, stack};
      stack += p->memory_bytes ? p->memory_bytes : 8 * (p->integer_registers + p->sse_registers);
    }
    place.ref = ref < 0 ? 0 : static_cast<uint32_t>(ref);
    if (ref >= 0) tensors.push_back(place);
  }
  return tensors;
}

uint32_t TensorPlaceCookie(const std::vector<TensorArgPlace>& places) {
  uint32_t cookie = 0;
  for (size_t i = 0; i < places.size() && i < TP_SHAPES_TENSORS; ++i) {
    const TensorArgPlace& p = places[i];
    uint32_t code = 0;
    if (p.kind == TensorArgPlace::kRegister && p.where >= 0 && p.where < kIntegerRegisters)
      code = 1 + static_cast<uint32_t>(p.where);
    else if (p.kind == TensorArgPlace::kStack && p.where >= 8 && p.where % 8 == 0 && p.where / 8 + 6 <= 63)
      code = static_cast<uint32_t>(p.where / 8 + 6);
    if (code) code |= (p.ref & 3) << 6;
    cookie |= code << (8 * i);
  }
  return cookie;
}

uint32_t TensorPlaceCookieOf(const char* symbol, std::string_view schema) {
  size_t ns = schema.find("::");
  if (ns == std::string_view::npos) return 0;
  std::optional<std::string> params = CallParamList(symbol);
  std::optional<SchemaText> text = SplitSchema(schema.substr(ns + 2));
  if (!params || !text) return 0;
  std::optional<std::vector<TensorArgPlace>> places = TensorArgPlaces(*params, text->returns, true);
  return places ? TensorPlaceCookie(*places) : 0;
}

std::optional<std::vector<SchemaArg>> SchemaArgsOf(std::string_view schema) {
  size_t ns = schema.find("::");
  if (ns == std::string_view::npos) return std::nullopt;
  std::optional<SchemaText> text = SplitSchema(schema.substr(ns + 2));
  if (!text) return std::nullopt;
  std::vector<SchemaArg> args;
  for (std::string_view arg : text->args) {
    if (arg == "*") continue;
    std::string_view type = arg.substr(0, arg.find(' '));  // "Tensor(a!)", "Tensor?", "Scalar"
    // at::Tensor const& / at::Tensor& / optional<at::Tensor> const&: a
    // Tensor, aliased or not, optional or not, but not a list (ArrayRef<Tensor>).
    std::string_view bare = type.substr(0, type.find_first_of("(?"));
    bool list = type.find('[') != std::string_view::npos;
    args.push_back({.tensor = bare == "Tensor" && !list, .scalar = type == "Scalar",
                    .mutated = type.find('!') != std::string_view::npos});
  }
  return args;
}

}  // namespace torchprobe
