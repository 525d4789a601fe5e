// Live status line; see the header.
#include "userspace/session/status_line.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>

namespace torchprobe {

StatusLine::StatusLine(bool quiet) : enabled_(!quiet && isatty(STDERR_FILENO)) {}

void StatusLine::Update(uint64_t now_ns, uint64_t events, uint64_t drops) {
  if (!enabled_) return;
  if (last_ns_ == 0) {
    last_ns_ = now_ns;
    return;
  }
  if (now_ns - last_ns_ < 500'000'000) return;
  double rate = static_cast<double>(events - last_events_) * 1e9 / static_cast<double>(now_ns - last_ns_);
  std::fprintf(stderr, "\r\033[Ktorchprobe: %" PRIu64 " events, %.0f/s, %" PRIu64 " dropped (Ctrl-C to stop)",
               events, rate, drops);
  std::fflush(stderr);
  drawn_ = true;
  last_ns_ = now_ns;
  last_events_ = events;
}

void StatusLine::Clear() {
  if (drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace torchprobe
