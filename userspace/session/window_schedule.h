// When a `record` captures, like torch.profiler's schedule and its
// start()/stop(): --start-after S, then windows of --window S every
// --every S (back to back when --every is not given), or one window
// to the end (with --steps, StepWindows cuts that one by steps); SIGUSR1
// toggles capture on and off, overriding the timed schedule from then on. Pure logic on times, so the session asks it once
// per poll and the tests need no target.
#ifndef TORCHPROBE_SESSION_WINDOW_SCHEDULE_H
#define TORCHPROBE_SESSION_WINDOW_SCHEDULE_H

#include <cstdint>
#include <string>

namespace torchprobe {

struct WindowOptions {
  double start_after_s = 0;  // --start-after: nothing captured before
  double window_s = 0;       // --window: capture length; 0: one window to the end
  double every_s = 0;        // --every: period of windows; 0: == window_s
  // Windows counted in training steps (session/step_windows.h): skip
  // --skip-steps, capture --steps, again every --every-steps (0: once).
  uint64_t steps = 0;
  uint64_t skip_steps = 0;
  uint64_t every_steps = 0;
};

class WindowSchedule {
 public:
  static constexpr int64_t kClosed = -1;

  WindowSchedule(const WindowOptions& options, uint64_t start_ns) : options_(options), start_ns_(start_ns) {}

  // Which window `now_ns` falls in: kClosed between windows, else an id that
  // changes whenever a new window begins (the session numbers its files).
  int64_t Slot(uint64_t now_ns) const;
  // SIGUSR1: an open capture closes, a closed one opens a new window
  // (with --steps it does nothing: the steps say when).
  void Toggle(uint64_t now_ns);

  // Windows give numbered files (out.0.pftrace, ...) when there can be
  // several from the start; a window SIGUSR1 opens later is numbered anyway.
  bool numbered() const { return options_.window_s > 0 || options_.every_steps > 0; }

 private:
  WindowOptions options_;
  uint64_t start_ns_;
  bool toggled_ = false;  // SIGUSR1 seen: toggle_slot_ rules
  int64_t toggle_slot_ = kClosed;
  int64_t toggles_on_ = 0;
};

// "out.pftrace", 3 -> "out.3.pftrace"; "out", 3 -> "out.3";
// "dir.d/out" keeps the dot of the directory. `number` as text: "N" names
// them all ("out.N.pftrace").
std::string NumberedPath(const std::string& path, const std::string& number);
inline std::string NumberedPath(const std::string& path, int64_t number) {
  return NumberedPath(path, std::to_string(number));
}

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_WINDOW_SCHEDULE_H
