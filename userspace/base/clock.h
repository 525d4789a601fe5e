// The one clock read: nanoseconds of CLOCK_MONOTONIC (the clock
// bpf_ktime_get_ns() reads, so userspace and BPF timestamps compare), or of
// another clock where a snapshot pairs two.
#ifndef TORCHPROBE_BASE_CLOCK_H
#define TORCHPROBE_BASE_CLOCK_H

#include <time.h>

#include <cstdint>

namespace torchprobe {

inline uint64_t NowNs(clockid_t clock = CLOCK_MONOTONIC) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_CLOCK_H
