// Itanium-mangled at::_ops names; see the header.
#include "userspace/discover/op_symbols.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace torchprobe {
namespace {

constexpr std::string_view kOpsPrefix = "_ZN2at4_ops";

// Reads one <source-name> ("<decimal length><identifier>") off the front.
std::optional<std::string_view> TakeSourceName(std::string_view* text) {
  size_t digits = 0;
  size_t length = 0;
  while (digits < text->size() && (*text)[digits] >= '0' && (*text)[digits] <= '9') {
    length = length * 10 + static_cast<size_t>((*text)[digits] - '0');
    if (length > 4096) return std::nullopt;
    ++digits;
  }
  if (digits == 0 || (*text)[0] == '0' || length == 0 || text->size() - digits < length) return std::nullopt;
  std::string_view name = text->substr(digits, length);
  text->remove_prefix(digits + length);
  return name;
}

bool IsIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// "at::Tensor" as a whole type name, not at::TensorOptions.
bool MentionsTensor(std::string_view param) {
  constexpr std::string_view kTensor = "at::Tensor";
  for (size_t at = param.find(kTensor); at != std::string_view::npos; at = param.find(kTensor, at + 1)) {
    size_t end = at + kTensor.size();
    if (end == param.size() || !IsIdentChar(param[end])) return true;
  }
  return false;
}

ArgKind KindOfParam(std::string_view param) {
  if (!MentionsTensor(param)) return ArgKind::kOther;
  // ArrayRef<Tensor>, List<optional<Tensor>>, ITensorListRef (2.x)...
  if (param.find("ArrayRef") != std::string_view::npos || param.find("List") != std::string_view::npos ||
      param.find("vector") != std::string_view::npos)
    return ArgKind::kTensorList;
  return ArgKind::kTensor;
}

}  // namespace

std::optional<OpsSymbol> ParseOpsSymbol(std::string_view mangled) {
  if (!mangled.starts_with(kOpsPrefix) || mangled.find('.') != std::string_view::npos) return std::nullopt;
  std::string_view rest = mangled.substr(kOpsPrefix.size());
  std::optional<std::string_view> struct_name = TakeSourceName(&rest);
  if (!struct_name) return std::nullopt;
  std::optional<std::string_view> member = TakeSourceName(&rest);
  if (!member || rest.empty() || rest[0] != 'E') return std::nullopt;  // 'E' closes the nested name
  return OpsSymbol{*struct_name, *member};
}

bool IsOpCallSymbol(std::string_view mangled) {
  std::optional<OpsSymbol> parsed = ParseOpsSymbol(mangled);
  return parsed && parsed->member == "call";
}

std::vector<NameSplit> CandidateSplits(std::string_view struct_name) {
  std::vector<NameSplit> splits;
  splits.push_back({std::string(struct_name), ""});
  for (size_t i = 1; i + 1 < struct_name.size(); ++i) {
    if (struct_name[i] == '_')
      splits.push_back({std::string(struct_name.substr(0, i)), std::string(struct_name.substr(i + 1))});
  }
  return splits;
}

std::optional<std::vector<std::string_view>> SplitParamList(std::string_view params) {
  if (params.size() < 2 || params.front() != '(' || params.back() != ')') return std::nullopt;
  params = params.substr(1, params.size() - 2);
  std::vector<std::string_view> parts;
  if (params.empty() || params == "void") return parts;
  int depth = 0;
  size_t begin = 0;
  for (size_t i = 0; i <= params.size(); ++i) {
    char c = i < params.size() ? params[i] : ',';
    if (c == '<' || c == '(' || c == '[') ++depth;
    else if (c == '>' || c == ')' || c == ']') --depth;
    else if (c == ',' && depth == 0) {
      std::string_view part = params.substr(begin, i - begin);
      while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
      parts.push_back(part);
      begin = i + 1;
    }
  }
  return parts;
}

std::optional<std::vector<ArgKind>> ParamListKinds(std::string_view params) {
  std::optional<std::vector<std::string_view>> parts = SplitParamList(params);
  if (!parts) return std::nullopt;
  std::vector<ArgKind> kinds;
  for (std::string_view part : *parts) kinds.push_back(KindOfParam(part));
  return kinds;
}

std::optional<std::vector<ArgKind>> CallArgKinds(const char* mangled) {
  std::optional<std::string> params = CallParamList(mangled);
  if (!params) return std::nullopt;
  return ParamListKinds(*params);
}

std::optional<std::string> CallParamList(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                   std::free);
  if (status != 0 || !demangled) return std::nullopt;
  std::string_view text = demangled.get();
  // "at::_ops::cos::call(at::Tensor const&)": the list after "::call".
  size_t open = text.find("::call(");
  if (open == std::string_view::npos) return std::nullopt;
  text.remove_prefix(open + 6);
  // Match the outer parentheses (a trailing " const" or clone never follows
  // a static member, but be exact anyway).
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    else if (text[i] == ')' && --depth == 0) return std::string(text.substr(0, i + 1));
  }
  return std::nullopt;
}

}  // namespace torchprobe
