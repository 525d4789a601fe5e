// The one-line live status on stderr, shown only when stderr is a terminal,
// as perf and bpftrace do: events, rate and drops while recording (with the
// time left under --duration), then what torchprobe is still doing (removing
// probes, waiting for the launched command).
#ifndef TORCHPROBE_SESSION_STATUS_LINE_H
#define TORCHPROBE_SESSION_STATUS_LINE_H

#include <cstdint>
#include <string>

namespace torchprobe {

class StatusLine {
 public:
  explicit StatusLine(bool quiet);
  // Redraws at most twice a second. `deadline_ns`: 0 when only Ctrl-C stops.
  void Update(uint64_t now_ns, uint64_t events, uint64_t drops, uint64_t deadline_ns);
  // Any other state, as one line (redrawn at most twice a second).
  void Show(uint64_t now_ns, const std::string& text);
  void Clear();

 private:
  bool Due(uint64_t now_ns);
  void Draw(const std::string& text);
  bool enabled_;
  bool drawn_ = false;
  uint64_t last_ns_ = 0;
  uint64_t last_events_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_STATUS_LINE_H
