// A time off the CPU as thread-state spans; see the header.
#include "userspace/model/thread_state.h"

namespace torchprobe {

std::vector<ThreadStateSpan> SpansOf(const OffCpu& off) {
  std::vector<ThreadStateSpan> spans;
  auto add = [&spans](uint64_t begin, uint64_t end, std::string name) {
    if (end > begin) spans.push_back({begin, end, std::move(name)});
  };
  if (off.kind == OffCpu::kPreempted) {
    add(off.off_ns, off.on_ns, std::string(kRunnablePrefix) + " (preempted)");
    return spans;
  }
  std::string asleep = off.kind == OffCpu::kGil ? std::string(kGilWaitName)
                                                : std::string(kBlockedPrefix) + " (" + off.state + ")" +
                                                      (off.wait.empty() ? "" : ": " + off.wait);
  // A wakeup not seen (or out of order): asleep the whole time, as far as we know.
  uint64_t woken = off.wake_ns >= off.off_ns && off.wake_ns <= off.on_ns ? off.wake_ns : off.on_ns;
  add(off.off_ns, woken, asleep);
  add(woken, off.on_ns, std::string(kRunnablePrefix) + " (woken)");
  return spans;
}

SpanKind KindOfSpan(std::string_view name, std::string* where) {
  if (name.starts_with(kRunnablePrefix)) return SpanKind::kRunnable;
  if (name == kGilWaitName) return SpanKind::kGil;
  if (!name.starts_with(kBlockedPrefix)) return SpanKind::kOther;
  if (where) {
    size_t colon = name.find(": ");
    size_t paren = name.find('(');
    std::string state = paren != std::string_view::npos ? std::string(name.substr(paren, 3)) : "";
    *where = colon == std::string_view::npos ? "outside a system call" : std::string(name.substr(colon + 2));
    if (state == "(D)") *where += " (D)";
  }
  return SpanKind::kBlocked;
}

}  // namespace torchprobe
