// Whether a hardware breakpoint set through ptrace traps on this machine.
// Some virtual machines (seen: AMD EPYC under Firecracker) accept writes to
// a thread's debug registers (PTRACE_POKEUSER succeeds) but never trap when
// the thread runs the address: an injection there would wait for a safe
// point that never comes, with the target seized and armed all the while.
// --inject-cupti asks first, before it touches a target, and the tests that
// need a trap skip with the reason.
//
// How: a child of ours (fork, nothing but system calls before it is traced)
// calls a noinline function of this binary in a loop, DR0 on its entry.
// A TRAP_HWBKPT stop answers yes; a thousand calls without one, no. A child
// that never ran within the bound says neither: the injection then tries,
// and its own timeout says why it failed. Asked once per process.
#ifndef TORCHPROBE_ATTACH_HARDWARE_BREAKPOINTS_H
#define TORCHPROBE_ATTACH_HARDWARE_BREAKPOINTS_H

#include "userspace/base/status.h"

namespace torchprobe {

// Ok where a breakpoint traps (or the probe could not tell); otherwise one
// line saying why not ("this machine's debug registers do not trap (...)").
const Status& HardwareBreakpointsTrap();

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_HARDWARE_BREAKPOINTS_H
