// Live status line; see the header.
#include "userspace/session/status_line.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>

namespace torchprobe {

StatusLine::StatusLine(bool quiet) : enabled_(!quiet && isatty(STDERR_FILENO)) {}

bool StatusLine::Due(uint64_t now_ns) {
  if (!enabled_) return false;
  if (drawn_ && now_ns - last_ns_ < 500'000'000) return false;
  return true;
}

void StatusLine::Draw(const std::string& text) {
  std::fprintf(stderr, "\r\033[Ktorchprobe: %s", text.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void StatusLine::Update(uint64_t now_ns, uint64_t events, uint64_t drops, uint64_t deadline_ns) {
  if (!enabled_) return;
  if (last_ns_ == 0) {
    last_ns_ = now_ns;
    last_events_ = events;
    return;
  }
  if (now_ns - last_ns_ < 500'000'000) return;
  double rate = static_cast<double>(events - last_events_) * 1e9 / static_cast<double>(now_ns - last_ns_);
  char stop[64];
  if (deadline_ns) {
    double left = deadline_ns > now_ns ? static_cast<double>(deadline_ns - now_ns) / 1e9 : 0;
    std::snprintf(stop, sizeof(stop), "%.0f s left", left);
  } else {
    std::snprintf(stop, sizeof(stop), "Ctrl-C to stop");
  }
  char text[256];
  std::snprintf(text, sizeof(text), "%" PRIu64 " events, %.0f/s, %" PRIu64 " dropped (%s)", events,
                rate, drops, stop);
  Draw(text);
  last_ns_ = now_ns;
  last_events_ = events;
}

void StatusLine::Show(uint64_t now_ns, const std::string& text) {
  if (!Due(now_ns)) return;
  Draw(text);
  last_ns_ = now_ns;
}

void StatusLine::Clear() {
  if (drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace torchprobe
