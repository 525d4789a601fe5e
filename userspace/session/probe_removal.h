// The end of a run's probes: the keeper has been asked to remove every link;
// the run waits for those the targets hit (per-symbol probes come off at ~20
// a second; unused ones are left to the keeper, inert), showing what is left.
#ifndef TORCHPROBE_SESSION_PROBE_REMOVAL_H
#define TORCHPROBE_SESSION_PROBE_REMOVAL_H

#include <cstdint>

#include "userspace/attach/probe_keeper.h"
#include "userspace/session/status_line.h"

namespace torchprobe {

// Waits until no probe a target hits is left and the guarded processes are
// let go (at most 2 s: a thread in uninterruptible sleep is left to the
// keeper), or a stop signal arrives (the keeper goes on alone). `start_ns`:
// when removal began.
struct Removal {
  // Until the last breakpoint of a link the targets hit was out of their
  // code (ProbeKeeper::HotInCode): what the removal cost them.
  uint64_t out_of_code_ns = 0;
  // Until every such link's close returned and the guards let go: the
  // kernel's grace periods after the breakpoints are out (the targets run
  // unhindered meanwhile).
  uint64_t released_ns = 0;
};
Removal WaitForRemoval(ProbeKeeper& keeper, StatusLine& status_line, uint64_t start_ns);

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_PROBE_REMOVAL_H
