// The one-line live status on stderr (events, rate, drops), shown only when
// stderr is a terminal, as perf and bpftrace do.
#ifndef TORCHPROBE_SESSION_STATUS_LINE_H
#define TORCHPROBE_SESSION_STATUS_LINE_H

#include <cstdint>

namespace torchprobe {

class StatusLine {
 public:
  explicit StatusLine(bool quiet);
  // Redraws at most twice a second.
  void Update(uint64_t now_ns, uint64_t events, uint64_t drops);
  void Clear();

 private:
  bool enabled_;
  bool drawn_ = false;
  uint64_t last_ns_ = 0;
  uint64_t last_events_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_STATUS_LINE_H
