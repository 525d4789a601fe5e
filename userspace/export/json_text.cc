#include "userspace/export/json_text.h"

#include <charconv>

#include "userspace/base/utf8.h"

namespace torchprobe {

JsonText& JsonText::String(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  out_.push_back('"');
  for (size_t i = 0; i < text.size();) {
    // Runs of printable ASCII (nearly every op name and schema) in one append.
    size_t run = i;
    while (run < text.size() && text[run] >= 0x20 && text[run] < 0x7f && text[run] != '"' && text[run] != '\\')
      ++run;
    if (run > i) {
      out_.append(text.data() + i, run - i);
      i = run;
      continue;
    }
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out_.push_back('\\');
      out_.push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      out_.append("\\u00");
      out_.push_back(kHex[c >> 4]);
      out_.push_back(kHex[c & 0xF]);
      ++i;
    } else {
      // Names come from the target's memory: a byte that is not UTF-8 must
      // not make the whole file unreadable.
      size_t n = Utf8Length(text, i);
      if (n == 0) {
        out_.append("\\ufffd");
        ++i;
      } else {
        out_.append(text.substr(i, n));
        i += n;
      }
    }
  }
  out_.push_back('"');
  return *this;
}

JsonText& JsonText::UInt(uint64_t value) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), value);
  out_.append(buf, r.ptr);
  return *this;
}

JsonText& JsonText::Int(int64_t value) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), value);
  out_.append(buf, r.ptr);
  return *this;
}

JsonText& JsonText::Micros(uint64_t ns) {
  UInt(ns / 1000);
  char frac[4] = {'.', static_cast<char>('0' + ns % 1000 / 100), static_cast<char>('0' + ns % 100 / 10),
                  static_cast<char>('0' + ns % 10)};
  out_.append(frac, 4);
  return *this;
}

}  // namespace torchprobe
