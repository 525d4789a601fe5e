// A count with its noun for the lines people read: "1 probe", "2 probes".
#ifndef TORCHPROBE_BASE_COUNTED_H
#define TORCHPROBE_BASE_COUNTED_H

#include <cstdint>
#include <string>
#include <string_view>

namespace torchprobe {

inline std::string Counted(uint64_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_COUNTED_H
