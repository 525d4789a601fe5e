// Schema re-printing; see the header. The rules mirror c10's
// operator<<(FunctionSchema) and IValue printing; the parse is the small
// subset of the schema grammar that native_functions.yaml uses.
#include "userspace/discover/schema_format.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace torchprobe {
namespace {

bool IsIdentChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// Walks a schema's text one character at a time, keeping the bracket depth
// and skipping quoted strings (with their escapes), so that commas and
// brackets inside default strings are not taken for syntax.
struct SyntaxScanner {
  int depth = 0;
  char quote = 0;
  // Consumes text[*i] (and the character an escape protects); returns it when
  // it is syntax, 0 inside a string. Brackets change the depth as they pass.
  char Next(std::string_view text, size_t* i) {
    char c = text[*i];
    if (quote) {
      if (c == '\\') ++*i;
      else if (c == quote) quote = 0;
      return 0;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      return 0;
    }
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    return c;
  }
};

// Splits at commas outside (), [] and quotes.
std::vector<std::string_view> SplitTopLevel(std::string_view text) {
  std::vector<std::string_view> parts;
  SyntaxScanner scanner;
  size_t begin = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (scanner.Next(text, &i) == ',' && scanner.depth == 0) {
      parts.push_back(Trim(text.substr(begin, i - begin)));
      begin = i + 1;
    }
  }
  std::string_view last = Trim(text.substr(begin));
  if (!last.empty() || !parts.empty()) parts.push_back(last);
  return parts;
}

// The index of the bracket closing the one at `open`, or npos.
size_t MatchingClose(std::string_view text, size_t open) {
  SyntaxScanner scanner;
  for (size_t i = open; i < text.size(); ++i) {
    char c = scanner.Next(text, &i);
    if ((c == ')' || c == ']') && scanner.depth == 0) return i;
  }
  return std::string_view::npos;
}

// "Tensor(a -> *) self=x" -> type "Tensor(a -> *)", rest "self=x".
void SplitTypeAndRest(std::string_view arg, std::string_view* type, std::string_view* rest) {
  int depth = 0;
  for (size_t i = 0; i < arg.size(); ++i) {
    if (arg[i] == '(') ++depth;
    else if (arg[i] == ')') --depth;
    else if (arg[i] == ' ' && depth == 0) {
      *type = arg.substr(0, i);
      *rest = Trim(arg.substr(i + 1));
      return;
    }
  }
  *type = arg;
  *rest = {};
}

// Dimname parses to a string type, so it prints as "str".
std::string PrintedType(std::string_view type) {
  constexpr std::string_view kDimname = "Dimname";
  if (type.starts_with(kDimname) && (type.size() == kDimname.size() || !IsIdentChar(type[kDimname.size()])))
    return "str" + std::string(type.substr(kDimname.size()));
  return std::string(type);
}

// The type with its alias annotation and optional marker removed.
std::string BareType(std::string_view type, bool* optional) {
  std::string bare;
  int depth = 0;
  for (char c : type) {
    if (c == '(') ++depth;
    else if (c == ')') --depth;
    else if (depth == 0) bare += c;
  }
  *optional = !bare.empty() && bare.back() == '?';
  if (*optional) bare.pop_back();
  return bare;
}

// The identifiers the schema parser accepts as numeric defaults, as the
// enum values they stand for (c10::ScalarType, Layout, MemoryFormat,
// at::Reduction).
std::optional<int64_t> EnumDefault(std::string_view word) {
  struct Entry {
    std::string_view word;
    int64_t value;
  };
  static constexpr Entry kEntries[] = {
      {"long", 4},   {"float", 6},   {"complex", 9},  {"strided", 0},           {"Mean", 1},
      {"Sum", 2},    {"int", 3},     {"double", 7},   {"contiguous_format", 0}, {"preserve_format", 1},
      {"channels_last", 2},          {"channels_last_3d", 3},
  };
  for (const Entry& e : kEntries)
    if (e.word == word) return e.value;
  return std::nullopt;
}

bool ParseNumber(std::string_view text, double* value, bool* is_float) {
  if (text.empty() || text.find('j') != std::string_view::npos) return false;
  std::string copy(text);
  char* end = nullptr;
  *value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size()) return false;
  *is_float = text.find_first_of(".eE") != std::string_view::npos;
  return true;
}

std::string Unescape(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    char c = body[++i];
    switch (c) {
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      default: out += c; break;  // \\ \' \" and anything else: the character
    }
  }
  return out;
}

// One scalar default of element type `type` ("int", "float", "Scalar"...).
std::string FormatScalar(std::string_view type, std::string_view value) {
  if (value == "None" || value == "True" || value == "False") return std::string(value);
  if (std::optional<int64_t> e = EnumDefault(value)) return std::to_string(*e);
  if (!value.empty() && (value.front() == '\'' || value.front() == '"') && value.size() >= 2 &&
      value.back() == value.front()) {
    if (type == "str") return QuoteString(Unescape(value.substr(1, value.size() - 2)));
    return std::string(value);
  }
  double number;
  bool is_float;
  if (!ParseNumber(value, &number, &is_float)) return std::string(value);
  if (type == "float" || is_float) return FormatDouble(number);
  return std::to_string(std::strtoll(std::string(value).c_str(), nullptr, 10));
}

std::string FormatDefault(std::string_view type, std::string_view value) {
  bool optional = false;
  std::string bare = BareType(type, &optional);
  if (value == "None") return "None";
  size_t bracket = bare.find('[');
  if (bracket == std::string::npos || bare.back() != ']') return FormatScalar(bare, value);
  // A list: "int[2] stride=1" means [1, 1]; "int[] dims=[0,1]" is spelled out.
  std::string elem = bare.substr(0, bracket);
  std::string size_text = bare.substr(bracket + 1, bare.size() - bracket - 2);
  std::vector<std::string> items;
  if (!value.empty() && value.front() == '[') {
    if (value.back() != ']') return std::string(value);
    for (std::string_view item : SplitTopLevel(value.substr(1, value.size() - 2)))
      if (!item.empty()) items.push_back(FormatScalar(elem, item));
  } else if (!size_text.empty()) {
    items.assign(std::strtoul(size_text.c_str(), nullptr, 10), FormatScalar(elem, value));
  } else {
    return FormatScalar(elem, value);
  }
  // c10 prints an int list default whose items are all equal as one item,
  // the way native_functions.yaml writes it, but only with two or more.
  bool int_like = elem == "int" || elem == "SymInt";
  if (int_like && !optional && items.size() > 1) {
    bool same = true;
    for (const std::string& item : items) same = same && item == items[0];
    if (same) return items[0];
  }
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + "]";
}

std::string FormatReturns(std::string_view returns) {
  returns = Trim(returns);
  std::vector<std::string_view> items;
  bool parenthesized = !returns.empty() && returns.front() == '(' && MatchingClose(returns, 0) == returns.size() - 1;
  if (parenthesized) items = SplitTopLevel(returns.substr(1, returns.size() - 2));
  else items.push_back(returns);
  std::vector<std::string> printed;
  for (std::string_view item : items) {
    std::string_view type, name;
    SplitTypeAndRest(item, &type, &name);
    printed.push_back(PrintedType(type) + (name.empty() ? "" : " " + std::string(name)));
  }
  // One plain return prints bare; a tuple type like "(str, t)[]" keeps its own.
  if (printed.size() == 1) {
    bool optional = false;
    std::string_view type, name;
    SplitTypeAndRest(items[0], &type, &name);
    if (BareType(type, &optional).find('(') == std::string::npos || !parenthesized) return printed[0];
  }
  std::string out = "(";
  for (size_t i = 0; i < printed.size(); ++i) out += (i ? ", " : "") + printed[i];
  return out + ")";
}

}  // namespace

std::optional<SchemaText> SplitSchema(std::string_view text) {
  size_t open = 0;
  while (open < text.size() && (IsIdentChar(text[open]) || text[open] == '.')) ++open;
  if (open == 0 || open == text.size() || text[open] != '(') return std::nullopt;
  size_t close = MatchingClose(text, open);
  constexpr std::string_view kArrow = " -> ";
  if (close == std::string_view::npos || text.substr(close + 1, kArrow.size()) != kArrow) return std::nullopt;
  SchemaText schema;
  schema.key = text.substr(0, open);
  schema.args = SplitTopLevel(text.substr(open + 1, close - open - 1));
  schema.returns = text.substr(close + 1 + kArrow.size());
  if (schema.returns.empty()) return std::nullopt;
  return schema;
}

std::vector<ArgKind> SchemaArgKinds(const SchemaText& schema) {
  std::vector<ArgKind> kinds;
  for (std::string_view arg : schema.args) {
    if (arg == "*") continue;
    std::string_view type, rest;
    SplitTypeAndRest(arg, &type, &rest);
    bool optional = false;
    std::string bare = BareType(type, &optional);
    if (!bare.starts_with("Tensor") || (bare.size() > 6 && IsIdentChar(bare[6]))) kinds.push_back(ArgKind::kOther);
    else if (bare.find('[') != std::string::npos) kinds.push_back(ArgKind::kTensorList);
    else kinds.push_back(ArgKind::kTensor);
  }
  return kinds;
}

std::string FormatDouble(double value) {
  int cls = std::fpclassify(value);
  if ((cls == FP_NORMAL || cls == FP_ZERO) && std::abs(value) < 1e10) {
    int64_t whole = static_cast<int64_t>(value);
    if (static_cast<double>(whole) == value) {
      if (whole == 0 && std::signbit(value)) return "-0.";
      return std::to_string(whole) + ".";
    }
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", value);  // ostream at max_digits10
  return buf;
}

std::string QuoteString(std::string_view value) {
  std::string out = "\"";
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\'': out += "\\'"; break;
      case '"': out += "\\\""; break;
      case '\a': out += "\\a"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\v': out += "\\v"; break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += c;
        } else {
          unsigned char u = static_cast<unsigned char>(c);
          char oct[5] = {'\\', static_cast<char>('0' + (u >> 6)), static_cast<char>('0' + ((u >> 3) & 7)),
                         static_cast<char>('0' + (u & 7)), 0};
          out += oct;
        }
    }
  }
  return out + "\"";
}

std::string FormatArgument(std::string_view arg) {
  arg = Trim(arg);
  if (arg == "*") return "*";
  std::string_view type, rest;
  SplitTypeAndRest(arg, &type, &rest);
  std::string out = PrintedType(type);
  size_t eq = rest.find('=');
  std::string_view name = Trim(rest.substr(0, eq));
  if (!name.empty()) out += " " + std::string(name);
  if (eq != std::string_view::npos) out += "=" + FormatDefault(type, Trim(rest.substr(eq + 1)));
  return out;
}

std::optional<std::string> FormatSchema(std::string_view ns, std::string_view text) {
  std::optional<SchemaText> schema = SplitSchema(text);
  if (!schema) return std::nullopt;
  std::string out = std::string(ns) + "::" + std::string(schema->key) + "(";
  for (size_t i = 0; i < schema->args.size(); ++i) out += (i ? ", " : "") + FormatArgument(schema->args[i]);
  return out + ") -> " + FormatReturns(schema->returns);
}

}  // namespace torchprobe
