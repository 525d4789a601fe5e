#include "userspace/report/text_format.h"

#include <cstdio>

namespace torchprobe {

std::string FormatTime(uint64_t ns) {
  double us = static_cast<double>(ns) / 1e3;
  char buf[64];
  if (us >= 1e6) {
    snprintf(buf, sizeof(buf), "%.3fs", us / 1e6);
  } else if (us >= 1e3) {
    snprintf(buf, sizeof(buf), "%.3fms", us / 1e3);
  } else {
    snprintf(buf, sizeof(buf), "%.3fus", us);
  }
  return buf;
}

std::string FormatBytes(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30)) snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  else if (bytes >= (1ull << 20)) snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / (1ull << 20));
  else if (bytes >= (1ull << 10)) snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(bytes) / (1ull << 10));
  else snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

std::string FormatShare(uint64_t part, uint64_t total) {
  if (total == 0) return "NaN";
  char buf[64];
  snprintf(buf, sizeof(buf), "%.2f%%",
           static_cast<double>(part) * 100.0 / static_cast<double>(total));
  return buf;
}

std::string PadLeft(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string PadRight(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

std::string OneLine(const std::string& s, size_t width) {
  constexpr size_t kEllipsis = 3;
  std::string line = s;
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  if (line.size() <= width) return line;
  size_t keep = width > kEllipsis ? width - kEllipsis : 0;
  // Back off over UTF-8 continuation bytes (10xxxxxx) to a character start.
  while (keep > 0 && (static_cast<unsigned char>(line[keep]) & 0xc0) == 0x80) --keep;
  return line.substr(0, keep) + "...";
}

}  // namespace torchprobe
