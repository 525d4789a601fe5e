// Removes torchprobe's probes from the target however torchprobe ends.
//
// A probe comes off when the last fd of its link is closed. If that last
// close happens in a process that is being killed (SIGKILL pending), the
// kernel cannot write the target's instructions back and leaks the
// breakpoint ("uprobe: ... failed to unregister, leaking uprobe"): the target
// traps on it, for nothing, until it exits. So torchprobe never makes that
// last close itself.
//
// The keeper is a child process that shares torchprobe's file descriptor
// table (clone with CLONE_FILES): every link torchprobe creates is the
// keeper's as well at once, with nothing passed. torchprobe asks it to close
// links (Release); if torchprobe dies, the keeper closes the probes' gate,
// resumes the processes held stopped at a library load, closes every link and
// exits, in a process no one is killing. It runs in a session of its own, so
// signals sent to torchprobe's process group (Ctrl-C, a terminal hang-up) do
// not reach it, and it ignores the stop signals.
//
// Links are closed hottest first. A per-symbol uprobe comes off after
// kernel grace periods taken under global locks: ~12 a second one at a
// time on this 6.18 kernel, ~15-24 from 2 to 16 at once, and other tracers'
// uprobe opens on the host wait behind them (measured here: another
// process' per-symbol opens took 0.1-0.7 ms each with no removal going on,
// 1-10 ms, up to 60, beside two closers, under 1 ms, up to 23, beside
// gentle removal below; a per-symbol attach of ~7000 probes took 51-126 s
// instead of 1.6 beside several keepers). A loop of small ops ran 2.5x
// slower while its unused probes came off (an earlier measurement); a
// same-run comparison with an untraced twin here saw no difference beyond
// the noise (20%). So the probes the target hits go first, at once (it
// runs slower until they are gone, and torchprobe waits for them); a probe
// it never hit is left in place, inert, until its process exits (then it
// goes with no one waiting), until it is hit (BPF's gated_hits, re-read
// every second), until SIGUSR1 ("remove every probe now") or until SIGUSR2
// ("remove the unused ones gently": one at a time, resting as long as each
// took, ~9 a second here, so that the keeper holds the kernel's locks at
// most half the time; the agent asks this of every window's keeper,
// agent/keeper_reaper.h). Links for every process (launch mode) go at
// once. Closing is done by short-lived closers, never more than a few at
// once, each reaped (probe_keeper.cc says how many).
//
// Once torchprobe is gone the keeper holds nothing of its but the links
// (fds 0-2 point at /dev/null): not the caller's pipes, not a killed run's
// temporary trace, not the CUPTI socket. It asks for oom_score_adj -1000
// (refused without CAP_SYS_RESOURCE): killed, it would make the last close
// of its links in a dying process, the leak it exists to prevent.
#ifndef TORCHPROBE_ATTACH_PROBE_KEEPER_H
#define TORCHPROBE_ATTACH_PROBE_KEEPER_H

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

struct KeeperShared;

class ProbeKeeper {
 public:
  // The op id of links that are hot whatever the counts: uprobe_multi links
  // (every op in one fd), the catch and loader probes.
  static constexpr uint32_t kAlwaysHot = 0xffffffffu;
  // The op id of the unwinder probes that keep a process' exceptions working
  // under uretprobe returns: closed only after its tracing was released.
  static constexpr uint32_t kReturnGuard = 0xfffffffeu;

  // Clones the keeper. Call before any link exists and while torchprobe has
  // one thread (the keeper is a copy of it).
  static StatusOr<std::unique_ptr<ProbeKeeper>> Start();
  // Without Finish(), behaves as Finish(false).
  ~ProbeKeeper();
  ProbeKeeper(const ProbeKeeper&) = delete;
  ProbeKeeper& operator=(const ProbeKeeper&) = delete;

  // The BPF maps it needs if torchprobe dies (fds of torchprobe's, shared).
  void SetMaps(int ctl_fd, int held_fd, int gated_hits_fd);
  // A new group of links, released together.
  uint32_t NewGroup();
  // Takes ownership of a link fd that probes process `pid` (-1: every
  // process): from now on only the keeper closes it. `witness`: an address
  // in `pid` where the link put a breakpoint (0: none known), read to tell
  // when the link is out of the target's code (HotInCode).
  void Adopt(int fd, uint32_t group, uint32_t op_id, int pid, uint64_t witness = 0);
  // Calls of op `op_id` seen so far: the order of removal.
  void SetCalls(uint32_t op_id, uint64_t calls);
  // Uretprobe returns (return_fixer.h): the fix requests map and the
  // list_returns program.
  void SetReturnFixing(int fixes_fd, int list_prog_fd);
  // Makes the keeper the tracer of every thread of `pid` that fixes return
  // addresses before exceptions; waits for it. "" or why it cannot.
  std::string GuardReturns(pid_t pid);
  // The unwinder probe the keeper attaches itself to a process forked by a
  // guarded one, before the child runs (`path`: libgcc_s, as openable here).
  void SetGuardProbe(const std::string& path, const std::vector<uint64_t>& offsets,
                     int throw_prog_fd);
  // The process' return probes are gone (or asked to go): once they are,
  // the keeper gives back what is left on its stacks and stops tracing it.
  // Without a call, that happens when torchprobe finishes or dies.
  void ReleaseReturns(pid_t pid);

  // Asks for a group's links (or every link) to be closed; returns at once.
  void Release(uint32_t group);
  void ReleaseAll();

  struct Progress {
    size_t pending = 0;      // asked to close, not closed yet
    size_t pending_hot = 0;  // ... of which links the target has hit
    uint64_t closed = 0;     // closed since the start
    size_t guarded = 0;      // processes whose returns the keeper still guards
    uint64_t throws_fixed = 0;  // exceptions made safe for uretprobe returns
  };
  Progress progress() const;
  // Of the links the target hits that were asked to go, those whose
  // breakpoints may still be in its code: a link is out once its witness
  // address holds the instruction again (the kernel removes a link's
  // breakpoints first, then waits for grace periods before its close
  // returns: ~30 ms, then up to ~150 ms more for uretprobes, measured
  // here), or once its close has returned. Until the keeper has ordered the
  // request, every pending link counts. What the target pays for a removal
  // ends when this is 0; the rest of pending_hot costs it nothing.
  size_t HotInCode() const;
  pid_t pid() const { return pid_; }
  // torchprobe is done with it: the keeper closes what it was asked to and
  // exits. With `wait`, returns once it has (everything closed).
  void Finish(bool wait);

 private:
  ProbeKeeper(KeeperShared* shared, size_t shared_bytes, int wake_fd, pid_t pid)
      : shared_(shared), shared_bytes_(shared_bytes), wake_fd_(wake_fd), pid_(pid) {}
  void Wake();

  KeeperShared* shared_;
  size_t shared_bytes_;
  int wake_fd_;
  pid_t pid_;
  uint32_t next_group_ = 1;
  bool finished_ = false;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_PROBE_KEEPER_H
