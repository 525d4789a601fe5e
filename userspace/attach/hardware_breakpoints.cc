// Does DR0 trap here? A traced child of ours answers; see the header.
#include "userspace/attach/hardware_breakpoints.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "userspace/base/clock.h"

namespace torchprobe {
namespace {

constexpr uint64_t kCallsWithoutTrap = 1000;     // "no": this many calls ran through the breakpoint
constexpr uint64_t kChildRunNs = 5'000'000'000;  // the child ran too little to tell (a loaded host)
constexpr int kAttempts = 3;

// The breakpoint's address: a call the compiler keeps, with a visible effect.
__attribute__((noipa)) void CountCall(volatile uint64_t* calls) { *calls = *calls + 1; }

void KillAndReap(pid_t child) {
  kill(child, SIGKILL);
  while (waitpid(child, nullptr, __WALL) < 0 && errno == EINTR) {
  }
}

// The child: traced by the thread that forked it (the one asking), stopped
// until the breakpoint is set, then calling CountCall. Only system calls:
// the parent may have other threads, whose locks it must not touch.
[[noreturn]] void RunChild(pid_t parent, volatile uint64_t* calls) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent || ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) _exit(1);
  raise(SIGSTOP);
  for (uint64_t i = 0; i < 100 * kCallsWithoutTrap; ++i) CountCall(calls);
  _exit(0);
}

// One try: Ok (it traps), an error (it does not, and why), or nullopt: the
// child did not run long enough to tell (a loaded host).
std::optional<Status> Probe() {
  const std::optional<Status> kCannotTell;
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return kCannotTell;
  volatile uint64_t* calls = static_cast<volatile uint64_t*>(page);
  pid_t parent = getpid();
  pid_t child = fork();
  if (child == 0) RunChild(parent, calls);
  if (child < 0) {
    munmap(page, 4096);
    return kCannotTell;
  }
  std::optional<Status> answer = kCannotTell;
  int status = 0;
  pid_t waited;
  while ((waited = waitpid(child, &status, __WALL)) < 0 && errno == EINTR) {
  }
  if (waited == child && WIFSTOPPED(status)) {
    uint64_t entry = reinterpret_cast<uint64_t>(&CountCall);
    void* dr0 = reinterpret_cast<void*>(offsetof(struct user, u_debugreg));
    void* dr7 = reinterpret_cast<void*>(offsetof(struct user, u_debugreg) + 7 * sizeof(unsigned long));
    if (ptrace(PTRACE_POKEUSER, child, dr0, reinterpret_cast<void*>(entry)) != 0 ||
        ptrace(PTRACE_POKEUSER, child, dr7, reinterpret_cast<void*>(1ul)) != 0) {
      answer = Status::Error(std::string("this machine refuses hardware breakpoints (") + strerrordesc_np(errno) + ")");
    } else if (ptrace(PTRACE_CONT, child, nullptr, nullptr) == 0) {
      uint64_t deadline = NowNs() + kChildRunNs;
      for (;;) {
        waited = waitpid(child, &status, __WALL | WNOHANG);
        if (waited == child) {
          siginfo_t info{};
          if (WIFSTOPPED(status) && WSTOPSIG(status) == SIGTRAP &&
              ptrace(PTRACE_GETSIGINFO, child, nullptr, &info) == 0 && info.si_code == TRAP_HWBKPT) {
            answer = Status::Ok();  // it traps
            break;
          }
          // Gone: all its calls ran through (a loaded host kept us from
          // looking sooner), or it died: cannot tell.
          if (!WIFSTOPPED(status) && *calls < kCallsWithoutTrap) break;
          if (WIFSTOPPED(status)) ptrace(PTRACE_CONT, child, nullptr, nullptr);
        }
        if (*calls >= kCallsWithoutTrap) {
          answer = Status::Error("this machine's debug registers do not trap (a VM that does not pass them through)");
          break;
        }
        if (NowNs() >= deadline) break;
        usleep(100);
      }
    }
  }
  KillAndReap(child);
  munmap(page, 4096);
  return answer;
}

}  // namespace

const Status& HardwareBreakpointsTrap() {
  // Asked again while a loaded host keeps the child from running enough to
  // tell; never told, the injection tries (its own timeout speaks).
  static const Status answer = [] {
    for (int attempt = 0; attempt < kAttempts; ++attempt)
      if (std::optional<Status> told = Probe()) return *told;
    return Status::Ok();
  }();
  return answer;
}

}  // namespace torchprobe
