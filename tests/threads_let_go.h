// What the injector must leave behind in a target, checked from outside:
// no thread traced, none in a stop, no debug register set (read the way a
// debugger would: seized, interrupted, PEEKUSER, detached).
#ifndef TORCHPROBE_TESTS_THREADS_LET_GO_H
#define TORCHPROBE_TESTS_THREADS_LET_GO_H

#include <sys/types.h>

#include <string>
#include <vector>

namespace torchprobe::test {

// DR0-DR3 and DR7 of thread `tid`; empty when it cannot be traced.
std::vector<unsigned long> DebugRegisters(pid_t tid);

// "" when every thread of `pid` is untraced, not stopped and has no debug
// register set; otherwise what is wrong, thread by thread.
std::string ThreadsHeld(pid_t pid);

}  // namespace torchprobe::test

#endif  // TORCHPROBE_TESTS_THREADS_LET_GO_H
