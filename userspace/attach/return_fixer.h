// Keeps a process' C++ exceptions working while its op returns are traced
// with uretprobes: the tracer half of bpf/uretprobe_returns.bpf.c. Runs in
// the keeper process (probe_keeper.h), so that it outlives torchprobe.
//
// The keeper becomes the ptrace tracer of every thread of the process
// (PTRACE_SEIZE, which stops nothing; PTRACE_O_TRACECLONE, so new threads are
// traced from their first instruction). When a thread is about to raise an
// exception with trampolines on its stack, BPF stops it with a signal; the
// fixer writes the original return addresses back (only into slots that
// still hold the trampoline: exactly undoing the kernel's return probes) and
// resumes it with the signal suppressed. Every other signal and stop is
// passed on as if no tracer were there: other signals are re-injected, group
// stops are kept with PTRACE_LISTEN (the parent's waitpid sees the job
// control stops it would see anyway, never ours).
//
// Release gives every remaining address back, with the threads briefly
// stopped, and detaches: nothing of torchprobe is left on the stacks. If the
// keeper itself dies, the kernel detaches it; a thread stopped for a fix then
// gets its (ignored) SIGURG and would meet a trampoline: so nobody should
// kill the keeper (it ignores every catchable signal).
#ifndef TORCHPROBE_ATTACH_RETURN_FIXER_H
#define TORCHPROBE_ATTACH_RETURN_FIXER_H

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bpf/events.h"

namespace torchprobe {

class ReturnFixer {
 public:
  ReturnFixer() = default;
  ~ReturnFixer();
  ReturnFixer(const ReturnFixer&) = delete;
  ReturnFixer& operator=(const ReturnFixer&) = delete;

  // The fix requests map and the list_returns iterator program (duplicated:
  // the fixer keeps them after torchprobe closes its own).
  void SetBpf(int fixes_fd, int list_prog_fd);
  // A signalfd readable when a traced thread has something to report; -1
  // until the first Seize. Call OnChildEvents() when it is.
  int event_fd() const { return signal_fd_; }
  // Every fd the fixer holds (its duplicates and the signalfd): the keeper
  // keeps them when it closes what torchprobe left (probe_keeper.cc).
  std::vector<int> fds() const;

  // Traces every thread of `pid`. "" on success, else why not (already
  // traced by another tracer, gone, not permitted).
  std::string Seize(pid_t pid);
  // Handles every stop that is waiting.
  void OnChildEvents();
  // Gives back the return addresses still on `pid`'s stacks and detaches.
  // False if some thread would not stop (retry later).
  bool Release(pid_t pid);
  bool Tracing(pid_t pid) const;
  // Called for a process forked by a traced one, while it has not run yet:
  // it inherited the trampolines and breakpoints, and needs its own probe
  // on the unwinder before it may run.
  void set_on_fork(std::function<void(pid_t)> on_fork) { on_fork_ = std::move(on_fork); }
  std::vector<pid_t> pids();

  uint64_t fixes() const { return fixes_; }          // throws made safe
  uint64_t slots_fixed() const { return slots_fixed_; }

 private:
  struct Thread {
    pid_t pid = 0;         // its process
    bool stopped = false;  // in a ptrace stop we hold (releasing)
    int pending_signal = 0;  // to deliver when it is let go
  };
  void HandleStop(pid_t tid, int status);
  // Writes back the addresses of a fix request for `tid`; true if there was one.
  bool Fix(pid_t tid, int signal);
  void Resume(pid_t tid, Thread& thread, int signal);
  size_t GiveBack(pid_t pid, const tp_return_slots& slots);
  bool StopAll(pid_t pid);
  // Forgets threads that are gone without their exit reaching us (reaped
  // by someone else, or a thread group that exec'd).
  void Prune();

  std::function<void(pid_t)> on_fork_;
  int fixes_fd_ = -1;
  int list_prog_fd_ = -1;
  int signal_fd_ = -1;
  pid_t releasing_ = 0;  // the process whose stops are held, not resumed
  std::map<pid_t, Thread> threads_;  // by tid
  uint64_t fixes_ = 0;
  uint64_t slots_fixed_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_RETURN_FIXER_H
