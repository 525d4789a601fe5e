#include "userspace/session/probe_removal.h"

#include <unistd.h>

#include <string>

#include "userspace/base/clock.h"
#include "userspace/session/record_signals.h"

namespace torchprobe {

Removal WaitForRemoval(ProbeKeeper& keeper, StatusLine& status_line, uint64_t start_ns) {
  constexpr uint64_t kGuardWaitNs = 2'000'000'000;
  int stops = StopSignals();
  Removal removal;
  for (;;) {
    ProbeKeeper::Progress p = keeper.progress();
    uint64_t now = NowNs();
    if (!removal.out_of_code_ns && keeper.HotInCode() == 0) removal.out_of_code_ns = now - start_ns;
    bool guards_done = p.guarded == 0 || now - start_ns > kGuardWaitNs;
    if ((p.pending_hot == 0 && guards_done) || StopSignals() != stops) break;
    status_line.Show(NowNs(), "removing probes: " + std::to_string(p.pending_hot) + " the target hits, " +
                                  std::to_string(p.pending - p.pending_hot) + " unused (Ctrl-C leaves them to pid " +
                                  std::to_string(keeper.pid()) + ")");
    usleep(2'000);
  }
  status_line.Clear();
  removal.released_ns = NowNs() - start_ns;
  if (!removal.out_of_code_ns) removal.out_of_code_ns = removal.released_ns;
  return removal;
}

}  // namespace torchprobe
