// The probe keepers (attach/probe_keeper.h) that the agent's windows leave
// behind, and what the agent does with them.
//
// With uprobe_multi links a window's probes are gone when its record exits.
// With per-symbol uprobes (kernels before 6.6, or --attach uprobe) record
// returns once the probes the target hits are gone and leaves the rest,
// thousands it never hit (~7000 for PyTorch 1.13's libtorch), to its keeper,
// which by itself would hold them until the target exits: one keeper, its
// links and, through them, the window's BPF programs and 64 MiB ring, per
// window, for as long as a training job runs. So:
// - the agent is a child subreaper: a window's keeper, orphaned when record
//   exits, becomes the agent's child, so the agent knows it (its command
//   line is record's: `--pid P` names the target), reaps it, and tells its
//   exit from a window's;
// - it asks each keeper to remove the never-hit probes too, gently
//   (SIGUSR2: one at a time, resting as long as each took; see
//   probe_keeper.cc), so that a keeper ends;
// - no new window starts on a target while its last window's keeper still
//   removes (a skipped window, counted and logged): per-symbol windows on a
//   target come no faster than their probes can come off, and there is at
//   most one keeper per target;
// - at stop it asks every keeper to remove everything now (SIGUSR1) and
//   waits for them, kStopWaitS at most (the unit's TimeoutStopSec and the
//   DaemonSet's grace period leave room for it): a keeper killed with its
//   probes still in place leaves them inert in processes that never hit
//   them, until those exit (the kernel logs "leaking uprobe").
#ifndef TORCHPROBE_AGENT_KEEPER_REAPER_H
#define TORCHPROBE_AGENT_KEEPER_REAPER_H

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

namespace torchprobe {

class KeeperReaper {
 public:
  static constexpr int kStopWaitS = 120;

  // Makes this process its descendants' reaper (PR_SET_CHILD_SUBREAPER);
  // false with *error when it cannot.
  static bool BecomeSubreaper(std::string* error);
  // Takes the keepers among this process' children that it does not know
  // yet (a window's record has exited) and asks each to remove its unused
  // probes gently. Returns how many it took.
  size_t Adopt();
  // `pid` was reaped: true if it was a keeper.
  bool Reaped(pid_t pid);
  // Whether a keeper of a window on `target` is still removing probes; the
  // first time it is asked, *first_ask is set (to log the skip once).
  bool Removing(uint32_t target, pid_t* keeper, bool* first_ask);
  size_t count() const { return keepers_.size(); }
  // At stop: asks every keeper to remove everything now and waits up to
  // `timeout_s`, reaping them. Returns how many are still there.
  size_t Finish(int timeout_s);

 private:
  struct Kept {
    uint32_t target = 0;  // the pid its window traced; 0 if unknown
    bool asked = false;   // Removing() said so once
  };
  std::map<pid_t, Kept> keepers_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_KEEPER_REAPER_H
