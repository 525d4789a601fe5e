// A target's threads as the injector must leave them; see the header.
#include "tests/threads_let_go.h"

#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstddef>

#include "userspace/base/proc_maps.h"

namespace torchprobe::test {

std::vector<unsigned long> DebugRegisters(pid_t tid) {
  std::vector<unsigned long> registers;
  if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) return registers;
  ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
  int status = 0, signal = 0;
  // A signal's stop may come instead of the interrupt's: given back at the detach.
  if (waitpid(tid, &status, __WALL) == tid && WIFSTOPPED(status) && (status >> 16) == 0) signal = WSTOPSIG(status);
  for (int i : {0, 1, 2, 3, 7}) {
    errno = 0;
    long value = ptrace(PTRACE_PEEKUSER, tid,
                        reinterpret_cast<void*>(offsetof(struct user, u_debugreg) + i * sizeof(long)), nullptr);
    registers.push_back(errno == 0 ? static_cast<unsigned long>(value) : ~0ul);
  }
  ptrace(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(signal)));
  return registers;
}

std::string ThreadsHeld(pid_t pid) {
  std::string held;
  for (uint32_t tid : ListThreads(static_cast<uint32_t>(pid))) {
    std::string what;
    if (uint32_t tracer = ReadTracerPid(tid)) what += " traced by " + std::to_string(tracer);
    char state = ReadProcessState(tid);
    if (state == 't' || state == 'T') what += std::string(" stopped (") + state + ")";
    std::vector<unsigned long> registers = DebugRegisters(static_cast<pid_t>(tid));
    if (registers != std::vector<unsigned long>(5, 0)) {
      what += " debug registers";
      for (unsigned long r : registers) what += " " + std::to_string(r);
    }
    if (!what.empty()) held += "thread " + std::to_string(tid) + what + "; ";
  }
  return held;
}

}  // namespace torchprobe::test
