#include "userspace/report/json_value.h"

#include <cstdlib>

namespace torchprobe {

const JsonValue* JsonValue::Find(std::string_view key) const {
  for (const auto& [name, value] : members)
    if (name == key) return &value;
  return nullptr;
}

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  bool Parse(JsonValue* v, std::string* error) {
    bool ok = Value(v, 0);
    Space();
    if (ok && i_ != s_.size()) ok = Fail("text after the JSON value");
    if (!ok) *error = error_ + " at byte " + std::to_string(i_);
    return ok;
  }

 private:
  static constexpr int kMaxDepth = 256;

  bool Fail(const char* what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool Literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return Fail("invalid literal");
    i_ += word.size();
    return true;
  }
  bool Value(JsonValue* v, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    Space();
    if (i_ >= s_.size()) return Fail("unexpected end of file");
    char c = s_[i_];
    if (c == '{') return Object(v, depth);
    if (c == '[') return Array(v, depth);
    if (c == '"') {
      v->kind = JsonValue::kString;
      return String(&v->string);
    }
    if (c == 't' || c == 'f') {
      v->kind = JsonValue::kBool;
      v->boolean = c == 't';
      return Literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') return Literal("null");
    return Number(v);
  }
  bool Object(JsonValue* v, int depth) {
    v->kind = JsonValue::kObject;
    ++i_;
    Space();
    if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
    for (;;) {
      Space();
      std::string key;
      if (i_ >= s_.size() || s_[i_] != '"' || !String(&key)) return Fail("expected a member name");
      Space();
      if (i_ >= s_.size() || s_[i_++] != ':') return Fail("expected ':'");
      v->members.emplace_back(std::move(key), JsonValue());
      if (!Value(&v->members.back().second, depth + 1)) return false;
      Space();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
      return Fail("expected ',' or '}'");
    }
  }
  bool Array(JsonValue* v, int depth) {
    v->kind = JsonValue::kArray;
    ++i_;
    Space();
    if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
    for (;;) {
      v->items.emplace_back();
      if (!Value(&v->items.back(), depth + 1)) return false;
      Space();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
      return Fail("expected ',' or ']'");
    }
  }
  bool Hex4(uint32_t* code) {
    if (i_ + 4 > s_.size()) return Fail("short \\u escape");
    *code = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_++];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return Fail("bad \\u escape");
      *code = *code << 4 | static_cast<uint32_t>(d);
    }
    return true;
  }
  static void Utf8(uint32_t c, std::string* out) {
    if (c < 0x80) {
      out->push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out->push_back(static_cast<char>(0xC0 | c >> 6));
      out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | c >> 12));
      out->push_back(static_cast<char>(0x80 | (c >> 6 & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | c >> 18));
      out->push_back(static_cast<char>(0x80 | (c >> 12 & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (c >> 6 & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  bool String(std::string* out) {
    ++i_;  // the opening quote
    for (;;) {
      size_t run = i_;
      while (run < s_.size() && s_[run] != '"' && s_[run] != '\\' && static_cast<unsigned char>(s_[run]) >= 0x20)
        ++run;
      out->append(s_.data() + i_, run - i_);
      i_ = run;
      if (i_ >= s_.size()) return Fail("unterminated string");
      char c = s_[i_++];
      if (c == '"') return true;
      if (c != '\\') return Fail("control character in a string");
      if (i_ >= s_.size()) return Fail("unterminated string");
      char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out->push_back(e); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t code;
          if (!Hex4(&code)) return false;
          if (code >= 0xD800 && code < 0xDC00 && s_.substr(i_, 2) == "\\u") {
            i_ += 2;
            uint32_t low;
            if (!Hex4(&low)) return false;
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          Utf8(code, out);
          break;
        }
        default: return Fail("bad escape");
      }
    }
  }
  bool Number(JsonValue* v) {
    size_t start = i_;
    bool integral = true;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c >= '0' && c <= '9') {
        ++i_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        integral = false;
        ++i_;
      } else {
        break;
      }
    }
    if (i_ == start) return Fail("unexpected character");
    std::string text(s_.substr(start, i_ - start));
    char* end = nullptr;
    v->kind = JsonValue::kNumber;
    v->number = std::strtod(text.c_str(), &end);
    if (*end) return Fail("bad number");
    if (integral) v->integer = std::strtoll(text.c_str(), nullptr, 10);
    else v->integer = static_cast<int64_t>(v->number);
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
  std::string error_;
};

}  // namespace

bool ParseJson(std::string_view text, JsonValue* value, std::string* error) {
  return Parser(text).Parse(value, error);
}

}  // namespace torchprobe
