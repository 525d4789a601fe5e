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

}  // namespace torchprobe
