#include "userspace/session/window_schedule.h"

namespace torchprobe {

namespace {
constexpr int64_t kToggleSlotBase = int64_t{1} << 40;  // apart from the timed slots
uint64_t Ns(double s) { return static_cast<uint64_t>(s * 1e9); }
}  // namespace

int64_t WindowSchedule::Slot(uint64_t now_ns) const {
  if (toggled_) return toggle_slot_;
  uint64_t t = now_ns > start_ns_ ? now_ns - start_ns_ : 0;
  uint64_t after = Ns(options_.start_after_s);
  if (t < after) return kClosed;
  t -= after;
  if (options_.window_s <= 0) return 0;
  uint64_t window = Ns(options_.window_s);
  uint64_t every = options_.every_s > 0 ? Ns(options_.every_s) : window;
  if (window == 0 || every == 0) return 0;
  uint64_t k = t / every;
  return t - k * every < window ? static_cast<int64_t>(k) : kClosed;
}

void WindowSchedule::Toggle(uint64_t now_ns) {
  if (options_.steps > 0) return;  // --steps: windows are the steps', SIGUSR1 is ignored
  bool open = Slot(now_ns) != kClosed;
  toggled_ = true;
  toggle_slot_ = open ? kClosed : kToggleSlotBase + toggles_on_++;
}

std::string NumberedPath(const std::string& path, const std::string& number) {
  size_t slash = path.rfind('/');
  size_t dot = path.rfind('.');
  std::string n = "." + number;
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1))
    return path + n;  // no extension (or a dot file)
  return path.substr(0, dot) + n + path.substr(dot);
}

}  // namespace torchprobe
