#include "userspace/agent/target_text.h"

#include <cstdio>

namespace torchprobe {

std::string LogSafe(std::string_view text, size_t max_bytes) {
  std::string out;
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
    if (out.size() > max_bytes) {
      out.resize(max_bytes > 3 ? max_bytes - 3 : 0);
      return out + "...";
    }
  }
  return out;
}

std::string NameSafe(std::string_view text, size_t max_bytes, std::string_view also) {
  std::string out(text.substr(0, max_bytes));
  for (char& c : out) {
    bool kept = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                (c != '\0' && also.find(c) != std::string_view::npos);
    if (!kept) c = '_';
  }
  return out;
}

}  // namespace torchprobe
