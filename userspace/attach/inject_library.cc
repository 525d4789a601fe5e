// A library loaded into a running process through one borrowed thread; see
// the header.
#include "userspace/attach/inject_library.h"

#include <dlfcn.h>
#include <elf.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <optional>

#include "userspace/clock.h"
#include "userspace/discover/proc_maps.h"
#include "userspace/discover/remote_memory.h"
#include "userspace/discover/remote_symbols.h"

namespace torchprobe {
namespace {

constexpr uint64_t kStopWaitNs = 5'000'000'000;  // a thread interrupted stops within this
constexpr uint64_t kRedZone = 128;               // the x86-64 ABI's, below rsp: the thread's own
constexpr size_t kXstateBytes = 1 << 16;         // above any XSAVE area (AMX's is ~11 KiB)
constexpr size_t kMaxRemoteString = 512;         // dlerror's message, read back

uint64_t DebugRegister(int i) { return offsetof(struct user, u_debugreg) + i * sizeof(unsigned long); }

// ptrace with integer arguments (the libc wrapper takes them as pointers).
long Ptrace(__ptrace_request request, pid_t tid, uint64_t addr = 0, uint64_t data = 0) {
  return ptrace(request, tid, reinterpret_cast<void*>(addr), reinterpret_cast<void*>(data));
}

bool IsGroupStopSignal(int sig) { return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU; }

// What waitpid said about one tracee.
struct Stop {
  enum Kind { kNone, kGone, kSignal, kEvent } kind = kNone;
  int signal = 0;  // the signal of a signal-delivery stop; the stop signal of an event stop
};

Stop PollStop(pid_t tid) {
  int status = 0;
  pid_t r = waitpid(tid, &status, __WALL | WNOHANG);
  if (r == 0 || (r < 0 && errno == EINTR)) return {};
  if (r < 0 || WIFEXITED(status) || WIFSIGNALED(status)) return {Stop::kGone, 0};
  if (!WIFSTOPPED(status)) return {};
  // Seized without options, the only event is PTRACE_EVENT_STOP.
  return {(status >> 16) != 0 ? Stop::kEvent : Stop::kSignal, WSTOPSIG(status)};
}

Stop WaitStop(pid_t tid, uint64_t deadline_ns) {
  for (;;) {
    Stop s = PollStop(tid);
    if (s.kind != Stop::kNone || NowNs() >= deadline_ns) return s;
    usleep(200);
  }
}

// One thread of the target, seized.
struct Tracee {
  pid_t tid = 0;
  bool stopped = false;        // in a ptrace stop we know of
  bool group_stopped = false;  // ... the process' job-control stop: resumed with PTRACE_LISTEN
  bool gone = false;
  bool armed = false;          // its debug registers were written
  int stop_signal = 0;         // the signal of the signal-delivery stop it is in (0: an event stop)
  std::optional<user_regs_struct> saved;  // the borrowed thread's registers, to put back
  std::vector<uint8_t> xstate;            // ... and its FP/vector state (the kernel's size)
};

class Injection {
 public:
  explicit Injection(const InjectRequest& request) : r_(request) {}
  ~Injection() { ReleaseAll(); }
  StatusOr<InjectResult> Run();

 private:
  std::string Where() const { return "process " + std::to_string(r_.pid); }
  Status Seize();
  Status StopAll();
  Status Arm(Tracee& t);
  void Resume(Tracee& t, int sig);
  StatusOr<Tracee*> AwaitSafePoint();
  bool HitOurBreakpoint(pid_t tid);
  bool TrapPending(pid_t tid) const;
  void Release(Tracee& t);
  void ReleaseAll();
  StatusOr<uint64_t> Call(Tracee& t, uint64_t sp, uint64_t function, uint64_t arg0, uint64_t arg1);
  std::string ReadString(uint64_t address);

  const InjectRequest& r_;
  std::vector<Tracee> tracees_;
};

Status Injection::Seize() {
  std::vector<uint32_t> tids = ListThreads(r_.pid);
  if (tids.empty()) return Status::Error("no process with pid " + std::to_string(r_.pid));
  for (uint32_t tid : tids) {
    if (Ptrace(PTRACE_SEIZE, static_cast<pid_t>(tid)) == 0) {
      Tracee t;
      t.tid = static_cast<pid_t>(tid);
      tracees_.push_back(std::move(t));
      continue;
    }
    int error = errno;
    if (error == ESRCH) continue;  // the thread ended meanwhile
    uint32_t tracer = ReadTracerPid(tid);
    return Status::Error(Where() + " cannot be ptraced" +
                         (tracer ? " (pid " + std::to_string(tracer) + " traces it: a debugger?)"
                                 : std::string(": ") + strerror(error)));
  }
  if (tracees_.empty()) return Status::Error(Where() + " exited");
  return Status::Ok();
}

// Every thread in a ptrace stop: interrupted, and any signal that came
// first passed on (the interrupt's stop follows it).
Status Injection::StopAll() {
  for (Tracee& t : tracees_)
    if (Ptrace(PTRACE_INTERRUPT, t.tid) != 0) t.gone = true;
  for (Tracee& t : tracees_) {
    uint64_t deadline = NowNs() + kStopWaitNs;
    while (!t.gone && !t.stopped) {
      Stop s = WaitStop(t.tid, deadline);
      if (s.kind == Stop::kNone)
        return Status::Error("thread " + std::to_string(t.tid) + " of " + Where() + " did not stop");
      if (s.kind == Stop::kGone) {
        t.gone = true;
      } else if (s.kind == Stop::kSignal) {
        Ptrace(PTRACE_CONT, t.tid, 0, static_cast<uint64_t>(s.signal));
      } else {
        t.stopped = true;
        t.group_stopped = IsGroupStopSignal(s.signal);
      }
    }
  }
  return Status::Ok();
}

Status Injection::Arm(Tracee& t) {
  unsigned long dr7 = 0;
  for (size_t i = 0; i < r_.safe_points.size(); ++i) {
    if (Ptrace(PTRACE_POKEUSER, t.tid, DebugRegister(static_cast<int>(i)), r_.safe_points[i]) != 0)
      return Status::Error("cannot set a breakpoint in thread " + std::to_string(t.tid) + ": " + strerror(errno));
    dr7 |= 1ul << (2 * i);  // Li: enabled for this thread; R/W and LEN 0: on execution
  }
  t.armed = true;
  if (Ptrace(PTRACE_POKEUSER, t.tid, DebugRegister(7), dr7) != 0)
    return Status::Error("cannot enable the breakpoints in thread " + std::to_string(t.tid) + ": " + strerror(errno));
  return Status::Ok();
}

void Injection::Resume(Tracee& t, int sig) {
  // A thread in the process' job-control stop stays stopped (LISTEN), as it
  // would untraced; it runs on at SIGCONT.
  if (t.group_stopped && sig == 0)
    Ptrace(PTRACE_LISTEN, t.tid);
  else
    Ptrace(PTRACE_CONT, t.tid, 0, static_cast<uint64_t>(sig));
  t.stopped = false;
  t.stop_signal = 0;
}

bool Injection::HitOurBreakpoint(pid_t tid) {
  siginfo_t info{};
  if (ptrace(PTRACE_GETSIGINFO, tid, nullptr, &info) != 0 || info.si_code != TRAP_HWBKPT) return false;
  errno = 0;
  long dr6 = Ptrace(PTRACE_PEEKUSER, tid, DebugRegister(6));
  return errno == 0 && (dr6 & 0xf) != 0;
}

// Whether the thread has a SIGTRAP queued (/proc's SigPnd: its own signals).
bool Injection::TrapPending(pid_t tid) const {
  std::ifstream status("/proc/" + std::to_string(r_.pid) + "/task/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigPnd:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (SIGTRAP - 1)) & 1;
  return false;
}

// The first thread to enter a safe point; the others keep running. Any
// other stop is passed through as it came.
StatusOr<Tracee*> Injection::AwaitSafePoint() {
  uint64_t deadline = NowNs() + r_.safe_point_timeout_ns;
  for (;;) {
    bool any = false;
    for (Tracee& t : tracees_) {
      if (t.gone) continue;
      any = true;
      Stop s = PollStop(t.tid);
      if (s.kind == Stop::kGone) {
        t.gone = true;
      } else if (s.kind == Stop::kSignal) {
        t.stopped = true;
        t.stop_signal = s.signal;
        if (s.signal == SIGTRAP && HitOurBreakpoint(t.tid)) return &t;
        Resume(t, s.signal);
      } else if (s.kind == Stop::kEvent) {
        t.stopped = true;
        t.group_stopped = IsGroupStopSignal(s.signal);
        Resume(t, 0);
      }
    }
    if (!any) return Status::Error(Where() + " exited");
    if (NowNs() >= deadline)
      return Status::Error("no " + r_.safe_point_what + " in " + std::to_string(r_.safe_point_timeout_ns / 1'000'000'000) +
                           " s");
    usleep(500);
  }
}

// Breakpoints cleared, registers put back where borrowed, and let go with
// the signal it was stopped for (not our breakpoint's trap).
void Injection::Release(Tracee& t) {
  if (t.gone) return;
  if (!t.stopped) {
    Ptrace(PTRACE_INTERRUPT, t.tid);
    uint64_t deadline = NowNs() + kStopWaitNs;
    while (!t.stopped) {
      Stop s = WaitStop(t.tid, deadline);
      if (s.kind == Stop::kGone) {
        t.gone = true;
        return;
      }
      if (s.kind == Stop::kNone) {
        // Stuck in the kernel. Never armed: it is let go when torchprobe
        // exits. Armed: wait on, whatever it takes, rather than leave a
        // breakpoint in a thread no one traces (its trap would kill it).
        if (!t.armed) return;
        deadline = NowNs() + kStopWaitNs;
        continue;
      }
      t.stopped = true;
      t.stop_signal = s.kind == Stop::kSignal ? s.signal : 0;
    }
  }
  int sig = t.stop_signal;
  if (sig == SIGTRAP && HitOurBreakpoint(t.tid)) sig = 0;
  Ptrace(PTRACE_POKEUSER, t.tid, DebugRegister(7), 0ul);
  for (int i = 0; i < 4; ++i) Ptrace(PTRACE_POKEUSER, t.tid, DebugRegister(i), 0ul);
  // A thread that hit a breakpoint just as it was interrupted stops for the
  // interrupt with our SIGTRAP still queued, which would kill it once let
  // go: it takes the trap while traced (breakpoints off now), and the trap
  // is dropped there.
  for (int tries = 0; tries < 8 && TrapPending(t.tid); ++tries) {
    Ptrace(PTRACE_CONT, t.tid, 0, static_cast<uint64_t>(sig));
    Stop s = WaitStop(t.tid, NowNs() + kStopWaitNs);
    if (s.kind == Stop::kGone) {
      t.gone = true;
      return;
    }
    if (s.kind == Stop::kNone) {  // running: stop it again and look once more
      Ptrace(PTRACE_INTERRUPT, t.tid);
      s = WaitStop(t.tid, NowNs() + kStopWaitNs);
      if (s.kind != Stop::kSignal && s.kind != Stop::kEvent) continue;
    }
    sig = s.kind == Stop::kSignal ? s.signal : 0;
    if (sig == SIGTRAP && HitOurBreakpoint(t.tid)) sig = 0;
  }
  if (t.saved) {
    if (!t.xstate.empty()) {
      iovec iov{t.xstate.data(), t.xstate.size()};
      ptrace(PTRACE_SETREGSET, t.tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov);
    }
    ptrace(PTRACE_SETREGS, t.tid, nullptr, &*t.saved);
    t.saved.reset();
  }
  Ptrace(PTRACE_DETACH, t.tid, 0, static_cast<uint64_t>(sig));
  t.gone = true;
}

void Injection::ReleaseAll() {
  for (Tracee& t : tracees_) Release(t);
}

// Calls function(arg0, arg1) on the borrowed, stopped thread `t`, whose
// stack at `sp` holds a return address of 0; its value (rax) once it
// returns there.
StatusOr<uint64_t> Injection::Call(Tracee& t, uint64_t sp, uint64_t function, uint64_t arg0, uint64_t arg1) {
  user_regs_struct regs = *t.saved;
  regs.rip = function;
  regs.rsp = sp;
  regs.rdi = arg0;
  regs.rsi = arg1;
  regs.rax = 0;
  regs.orig_rax = static_cast<unsigned long long>(-1);  // not in a syscall: nothing to restart
  if (ptrace(PTRACE_SETREGS, t.tid, nullptr, &regs) != 0)
    return Status::Error("cannot set thread " + std::to_string(t.tid) + "'s registers: " + strerror(errno));
  Resume(t, 0);
  uint64_t deadline = NowNs() + r_.call_timeout_ns;
  for (;;) {
    Stop s = WaitStop(t.tid, deadline);
    if (s.kind == Stop::kGone) {
      t.gone = true;
      return Status::Error(Where() + " exited during the injection");
    }
    if (s.kind == Stop::kNone) {
      // Put back where it was (Release interrupts it): the call is abandoned.
      return Status::Error("a call in thread " + std::to_string(t.tid) + " of " + Where() + " did not return in " +
                           std::to_string(r_.call_timeout_ns / 1'000'000'000) + " s");
    }
    t.stopped = true;
    t.stop_signal = s.kind == Stop::kSignal ? s.signal : 0;
    if (s.kind == Stop::kSignal && s.signal == SIGSEGV) {
      user_regs_struct after{};
      ptrace(PTRACE_GETREGS, t.tid, nullptr, &after);
      t.stop_signal = 0;  // ours: never delivered
      if (after.rip == 0) return static_cast<uint64_t>(after.rax);
      return Status::Error("the injected call faulted in thread " + std::to_string(t.tid) + " of " + Where());
    }
    if (s.kind == Stop::kEvent) t.group_stopped = IsGroupStopSignal(s.signal);
    Resume(t, s.kind == Stop::kSignal ? s.signal : 0);
  }
}

std::string Injection::ReadString(uint64_t address) {
  std::string out;
  char chunk[64];
  while (address && out.size() < kMaxRemoteString && ReadRemote(static_cast<pid_t>(r_.pid), address, chunk, sizeof(chunk))) {
    size_t n = strnlen(chunk, sizeof(chunk));
    out.append(chunk, n);
    if (n < sizeof(chunk)) break;
    address += sizeof(chunk);
  }
  return out;
}

StatusOr<InjectResult> Injection::Run() {
  if (r_.safe_points.empty() || r_.safe_points.size() > 4)
    return Status::Error("inject: 1 to 4 safe points (debug registers), not " + std::to_string(r_.safe_points.size()));
  // glibc 2.34+ has dlopen in libc; older ones in libdl, when loaded.
  StatusOr<RemoteFunction> dlopen_fn = FindRemoteFunction(r_.pid, "libc.so.6", "dlopen");
  const char* dl = "libc.so.6";
  if (!dlopen_fn.ok()) {
    dl = "libdl.so.2";
    dlopen_fn = FindRemoteFunction(r_.pid, dl, "dlopen");
    if (!dlopen_fn.ok()) return Status::Error(Where() + " has no dlopen to call (glibc before 2.34 without libdl)");
  }
  StatusOr<RemoteFunction> dlsym_fn = FindRemoteFunction(r_.pid, dl, "dlsym");
  StatusOr<RemoteFunction> dlerror_fn = FindRemoteFunction(r_.pid, dl, "dlerror");
  if (!dlsym_fn.ok()) return dlsym_fn.status();
  if (!dlerror_fn.ok()) return dlerror_fn.status();

  Status status = Seize();
  if (status.ok()) status = StopAll();
  for (Tracee& t : tracees_)
    if (status.ok() && !t.gone) status = Arm(t);
  if (!status.ok()) return status;
  for (Tracee& t : tracees_)
    if (!t.gone) Resume(t, 0);
  StatusOr<Tracee*> hit = AwaitSafePoint();
  if (!hit.ok()) return hit.status();
  Tracee& borrowed = **hit;
  for (Tracee& t : tracees_)
    if (&t != &borrowed) Release(t);

  user_regs_struct regs{};
  if (ptrace(PTRACE_GETREGS, borrowed.tid, nullptr, &regs) != 0)
    return Status::Error("cannot read thread " + std::to_string(borrowed.tid) + "'s registers: " + strerror(errno));
  std::vector<uint8_t> xstate(kXstateBytes);
  iovec iov{xstate.data(), xstate.size()};
  if (ptrace(PTRACE_GETREGSET, borrowed.tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov) != 0)
    return Status::Error("cannot read thread " + std::to_string(borrowed.tid) + "'s FP state: " + strerror(errno));
  xstate.resize(iov.iov_len);
  borrowed.saved = regs;
  borrowed.xstate = std::move(xstate);
  // No breakpoint in the borrowed thread while it runs our calls.
  Ptrace(PTRACE_POKEUSER, borrowed.tid, DebugRegister(7), 0ul);

  // The strings below the red zone, then a return address of 0: the stack
  // as at a call (rsp + 8 a multiple of 16 at the function's entry).
  std::string blob = r_.library + '\0' + r_.function + '\0' + r_.argument + '\0';
  uint64_t strings = (regs.rsp - kRedZone - blob.size()) & ~uint64_t{15};
  uint64_t sp = strings - 8;
  uint64_t zero = 0;
  iovec local[2] = {{&zero, sizeof(zero)}, {blob.data(), blob.size()}};
  iovec remote{reinterpret_cast<void*>(sp), sizeof(zero) + blob.size()};
  if (process_vm_writev(static_cast<pid_t>(r_.pid), local, 2, &remote, 1, 0) !=
      static_cast<ssize_t>(remote.iov_len))
    return Status::Error("cannot write to thread " + std::to_string(borrowed.tid) + "'s stack: " + strerror(errno));
  uint64_t library = strings, function = strings + r_.library.size() + 1;
  uint64_t argument = function + r_.function.size() + 1;

  StatusOr<uint64_t> handle = Call(borrowed, sp, dlopen_fn->address, library, RTLD_NOW);
  if (!handle.ok()) return handle.status();
  if (*handle == 0) {
    StatusOr<uint64_t> message = Call(borrowed, sp, dlerror_fn->address, 0, 0);
    std::string why = message.ok() ? ReadString(*message) : "";
    return Status::Error("dlopen(" + r_.library + ") failed in " + Where() + (why.empty() ? "" : ": " + why));
  }
  StatusOr<uint64_t> address = Call(borrowed, sp, dlsym_fn->address, *handle, function);
  if (!address.ok()) return address.status();
  if (*address == 0) return Status::Error(r_.library + " has no " + r_.function + " (an older build in " + Where() + "?)");
  StatusOr<uint64_t> value = Call(borrowed, sp, *address, argument, 0);
  if (!value.ok()) return value.status();
  // An int: the upper half of rax is not the function's.
  InjectResult result{static_cast<uint32_t>(borrowed.tid), static_cast<int32_t>(*value)};
  Release(borrowed);
  return result;
}

}  // namespace

StatusOr<InjectResult> InjectLibrary(const InjectRequest& request) {
  Injection injection(request);
  return injection.Run();
}

}  // namespace torchprobe
