#include "userspace/session/probe_removal.h"

#include <unistd.h>

#include <string>

#include "userspace/base/clock.h"
#include "userspace/session/record_signals.h"

namespace torchprobe {

void WaitForRemoval(ProbeKeeper& keeper, StatusLine& status_line, uint64_t start_ns) {
  constexpr uint64_t kGuardWaitNs = 2'000'000'000;
  int stops = StopSignals();
  for (;;) {
    ProbeKeeper::Progress p = keeper.progress();
    bool guards_done = p.guarded == 0 || NowNs() - start_ns > kGuardWaitNs;
    if ((p.pending_hot == 0 && guards_done) || StopSignals() != stops) break;
    status_line.Show(NowNs(), "removing probes: " + std::to_string(p.pending_hot) + " the target hits, " +
                                  std::to_string(p.pending - p.pending_hot) + " unused (Ctrl-C leaves them to pid " +
                                  std::to_string(keeper.pid()) + ")");
    usleep(10'000);
  }
  status_line.Clear();
}

}  // namespace torchprobe
