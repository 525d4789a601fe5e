// A CLOCK_REALTIME time as UTC text, millisecond precision, in one place:
// 2026-11-28T08:30:00.123Z for people, 20261128T083000.123Z in file names
// (sorts as time does, no character a file name minds).
#ifndef TORCHPROBE_BASE_UTC_TIME_H
#define TORCHPROBE_BASE_UTC_TIME_H

#include <time.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace torchprobe {

inline std::string UtcTime(uint64_t unix_ns, bool compact = false) {
  time_t seconds = static_cast<time_t>(unix_ns / 1'000'000'000ull);
  struct tm utc;
  gmtime_r(&seconds, &utc);
  char text[48];
  std::snprintf(text, sizeof text, compact ? "%04d%02d%02dT%02d%02d%02d.%03uZ" : "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ",
                utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<unsigned>(unix_ns / 1'000'000ull % 1000));
  return text;
}

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_UTC_TIME_H
