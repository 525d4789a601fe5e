// A library loaded into a running process through one borrowed thread, by a
// helper process; see the header.
#include "userspace/attach/inject_library.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "userspace/attach/detached_helper.h"
#include "userspace/base/clock.h"
#include "userspace/base/proc_maps.h"
#include "userspace/base/remote_memory.h"

namespace torchprobe {
namespace {

constexpr uint64_t kStopWaitNs = 5'000'000'000;  // threads interrupted together stop within this
constexpr uint64_t kRedZone = 128;               // the x86-64 ABI's, below rsp: the thread's own
constexpr size_t kXstateBytes = 1 << 16;         // above any XSAVE area (AMX's is ~11 KiB)
constexpr size_t kMaxRemoteString = 512;         // dlerror's message, read back
constexpr int kMaxTrapDrains = 8;                // a queued SIGTRAP taken while traced, at most this often
constexpr uint64_t kLingerPollNs = 10'000'000;   // how often a thread that could not be stopped is looked at

uint64_t DebugRegister(int i) { return offsetof(struct user, u_debugreg) + i * sizeof(unsigned long); }

// ptrace with integer arguments (the libc wrapper takes them as pointers).
long Ptrace(__ptrace_request request, pid_t tid, uint64_t addr = 0, uint64_t data = 0) {
  return ptrace(request, tid, reinterpret_cast<void*>(addr), reinterpret_cast<void*>(data));
}

// strerror translates (a locale lock another thread of the forking process
// may have held): the helper names errors untranslated.
std::string ErrorText(int error) {
  const char* text = strerrordesc_np(error);
  return text ? text : "error " + std::to_string(error);
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
  bool foreign = false;        // its tid went to a thread of another process between listing and seizing
  bool stopped = false;        // in a ptrace stop we know of
  bool interrupted = false;    // a PTRACE_INTERRUPT of ours is pending
  bool group_stopped = false;  // ... the process' job-control stop: resumed with PTRACE_LISTEN
  bool gone = false;           // let go, or exited
  bool armed = false;          // its debug registers may hold our breakpoints
  bool trap_queued = false;    // a SIGTRAP of ours may still be queued (it would kill it untraced)
  int stop_signal = 0;         // the signal of the signal-delivery stop it is in (0: an event stop)
  std::optional<user_regs_struct> saved;  // the borrowed thread's registers, to put back
  std::vector<uint8_t> xstate;            // ... and its FP/vector state (the kernel's size)
  uint64_t errno_address = 0;             // ... and its errno's
  int saved_errno = 0;
};

// The functions called in the target, found by the caller (reading ELF
// files is no work for a forked helper).
struct Functions {
  uint64_t dlopen = 0, dlsym = 0, dlerror = 0;
  uint64_t errno_location = 0;  // 0: not found, errno not put back
};

class Injection {
 public:
  Injection(const InjectRequest& request, const Functions& functions, const HelperChannel& channel)
      : r_(request), functions_(functions), channel_(channel) {}
  StatusOr<InjectResult> Run();
  // Every thread put back and let go, within kStopWaitNs; those that did
  // not stop in time stay seized, an interrupt pending. The copy removed.
  void ReleaseAll();
  // Waits for each thread still seized that letting go running would harm
  // (see the header), then lets it go: no bound.
  void Linger();

 private:
  std::string Where() const { return "process " + std::to_string(r_.pid); }
  void Step(InjectStep step) const {
    if (r_.on_step) r_.on_step(step);
  }
  Status Seize();
  Status StopAll();
  Status Arm(Tracee& t);
  void Resume(Tracee& t, int sig);
  StatusOr<Tracee*> AwaitSafePoint();
  bool HitOurBreakpoint(pid_t tid);
  bool AwaitStop(Tracee& t, uint64_t deadline);
  bool Release(Tracee& t, uint64_t deadline);
  void PutBack(Tracee& t);
  bool DrainQueuedTrap(Tracee& t, int* sig, uint64_t deadline);
  void ReleaseOthers(const Tracee& borrowed);
  StatusOr<uint64_t> Call(Tracee& t, uint64_t sp, uint64_t function, uint64_t arg0, uint64_t arg1,
                          bool announce = false);
  Status SaveErrno(Tracee& t, uint64_t sp);
  std::string ReadString(uint64_t address);
  void RemoveCopy();

  const InjectRequest& r_;
  const Functions& functions_;
  const HelperChannel& channel_;
  std::vector<Tracee> tracees_;
  bool copy_removed_ = false;
};

Status Injection::Seize() {
  std::vector<uint32_t> tids = ListThreads(r_.pid);
  if (tids.empty()) return Status::Error("no process with pid " + std::to_string(r_.pid));
  for (uint32_t tid : tids) {
    if (Ptrace(PTRACE_SEIZE, static_cast<pid_t>(tid)) == 0) {
      Tracee t;
      t.tid = static_cast<pid_t>(tid);
      // Seized, it cannot end and have its tid reused under us: now ask.
      t.foreign = !IsThreadOf(r_.pid, tid);
      tracees_.push_back(std::move(t));
      continue;
    }
    int error = errno;
    if (error == ESRCH) continue;  // the thread ended meanwhile
    uint32_t tracer = ReadTracerPid(tid);
    return Status::Error(Where() + " cannot be ptraced" +
                         (tracer ? " (traced by " + DescribeTracer(tracer) + ")"
                                 : ": " + ErrorText(error)));
  }
  if (tracees_.empty()) return Status::Error(Where() + " exited");
  return Status::Ok();
}

// Waits until `t` is in a ptrace stop (true), or gone (true, marked), or the
// deadline passes (false). Any stop will do: the kernel drops a pending
// interrupt at any ptrace stop (a signal's included), and in any of them
// its registers can be read and written; the signal of a signal-delivery
// stop is kept, to be delivered when the thread is resumed or let go.
bool Injection::AwaitStop(Tracee& t, uint64_t deadline) {
  if (t.gone || t.stopped) return true;
  Stop s = WaitStop(t.tid, deadline);
  if (s.kind == Stop::kNone) return false;
  t.interrupted = false;
  if (s.kind == Stop::kGone) {
    t.gone = true;
    return true;
  }
  t.stopped = true;
  t.stop_signal = s.kind == Stop::kSignal ? s.signal : 0;
  t.group_stopped = s.kind == Stop::kEvent && IsGroupStopSignal(s.signal);
  return true;
}

// Every thread in a ptrace stop: interrupted together, one bound for all.
Status Injection::StopAll() {
  for (Tracee& t : tracees_) {
    if (Ptrace(PTRACE_INTERRUPT, t.tid) != 0) t.gone = true;
    t.interrupted = !t.gone;
  }
  uint64_t deadline = NowNs() + kStopWaitNs;
  for (Tracee& t : tracees_)
    if (!AwaitStop(t, deadline))
      return Status::Error("thread " + std::to_string(t.tid) + " of " + Where() + " did not stop in " +
                           std::to_string(kStopWaitNs / 1'000'000'000) + " s");
  return Status::Ok();
}

Status Injection::Arm(Tracee& t) {
  unsigned long dr7 = 0;
  t.armed = true;  // from the first write on: Release clears them all
  for (size_t i = 0; i < r_.safe_points.size(); ++i) {
    if (Ptrace(PTRACE_POKEUSER, t.tid, DebugRegister(static_cast<int>(i)), r_.safe_points[i]) != 0)
      return Status::Error("cannot set a breakpoint in thread " + std::to_string(t.tid) + ": " + ErrorText(errno));
    dr7 |= 1ul << (2 * i);  // Li: enabled for this thread; R/W and LEN 0: on execution
  }
  if (Ptrace(PTRACE_POKEUSER, t.tid, DebugRegister(7), dr7) != 0)
    return Status::Error("cannot enable the breakpoints in thread " + std::to_string(t.tid) + ": " + ErrorText(errno));
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

// The first thread to enter a safe point; the others keep running. Any
// other stop is passed through as it came. Gives up when no one waits for
// the answer any more (torchprobe died).
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
        t.group_stopped = false;  // a signal is being delivered: it runs
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
    if (channel_.OwnerGone()) return Status::Error("no one waits for the injection into " + Where());
    if (NowNs() >= deadline)
      return Status::Error("no " + r_.safe_point_what + " in " + std::to_string(r_.safe_point_timeout_ns / 1'000'000'000) +
                           " s");
    usleep(500);
  }
}

// A borrowed thread's errno, registers and FP state as they were.
void Injection::PutBack(Tracee& t) {
  if (!t.saved) return;
  if (t.errno_address) {
    iovec local{&t.saved_errno, sizeof(t.saved_errno)};
    iovec remote{reinterpret_cast<void*>(t.errno_address), sizeof(t.saved_errno)};
    process_vm_writev(static_cast<pid_t>(r_.pid), &local, 1, &remote, 1, 0);
  }
  if (!t.xstate.empty()) {
    iovec iov{t.xstate.data(), t.xstate.size()};
    ptrace(PTRACE_SETREGSET, t.tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov);
  }
  ptrace(PTRACE_SETREGS, t.tid, nullptr, &*t.saved);
  t.saved.reset();
}

// A thread that hit a breakpoint just as it was interrupted stops for the
// interrupt with our SIGTRAP still queued, which would kill it once let go:
// it takes the trap while traced (breakpoints off, registers put back: the
// trap is taken before it runs an instruction), and the trap is dropped
// there. False when it did not stop again in time (trap_queued stays set).
bool Injection::DrainQueuedTrap(Tracee& t, int* sig, uint64_t deadline) {
  for (int tries = 0; tries < kMaxTrapDrains && IsSignalPending(r_.pid, static_cast<uint32_t>(t.tid), SIGTRAP);
       ++tries) {
    t.trap_queued = true;
    Ptrace(PTRACE_CONT, t.tid, 0, static_cast<uint64_t>(*sig));
    t.stopped = false;
    Stop s = WaitStop(t.tid, deadline);
    if (s.kind == Stop::kNone) {  // running: stop it again and look once more
      Ptrace(PTRACE_INTERRUPT, t.tid);
      t.interrupted = true;
      s = WaitStop(t.tid, deadline);
    }
    if (s.kind == Stop::kGone) {
      t.gone = true;
      return true;
    }
    if (s.kind == Stop::kNone) return false;
    t.stopped = true;
    *sig = s.kind == Stop::kSignal ? s.signal : 0;
    if (*sig == SIGTRAP && HitOurBreakpoint(t.tid)) *sig = 0;
  }
  t.trap_queued = false;
  return true;
}

// Breakpoints cleared, registers put back where borrowed, and let go with
// the signal it was stopped for (not our breakpoint's trap). False when it
// did not stop by `deadline`: still seized, an interrupt pending.
bool Injection::Release(Tracee& t, uint64_t deadline) {
  if (t.gone) return true;
  if (!t.stopped && !t.interrupted) {
    if (Ptrace(PTRACE_INTERRUPT, t.tid) != 0) {
      t.gone = true;
      return true;
    }
    t.interrupted = true;
  }
  if (!AwaitStop(t, deadline)) return false;
  if (t.gone) return true;
  int sig = t.stop_signal;
  if (sig == SIGTRAP && HitOurBreakpoint(t.tid)) sig = 0;
  if (sig == SIGSEGV && t.saved) {  // an abandoned call that returned to 0 meanwhile: ours
    user_regs_struct now{};
    if (ptrace(PTRACE_GETREGS, t.tid, nullptr, &now) == 0 && now.rip == 0) sig = 0;
  }
  if (t.armed) {
    bool cleared = Ptrace(PTRACE_POKEUSER, t.tid, DebugRegister(7), 0ul) == 0;
    for (int i = 0; i < 4; ++i) Ptrace(PTRACE_POKEUSER, t.tid, DebugRegister(i), 0ul);
    t.armed = !cleared;
  }
  PutBack(t);
  if (!DrainQueuedTrap(t, &sig, deadline)) return false;
  if (t.gone) return true;
  if (Ptrace(PTRACE_DETACH, t.tid, 0, static_cast<uint64_t>(sig)) == 0 || errno == ESRCH) t.gone = true;
  return t.gone;
}

// The threads other than the borrowed one, let go together (one bound for
// all). One that does not stop in time stays seized: Linger waits for it.
void Injection::ReleaseOthers(const Tracee& borrowed) {
  for (Tracee& t : tracees_) {
    if (&t == &borrowed || t.gone || t.stopped || t.interrupted) continue;
    if (Ptrace(PTRACE_INTERRUPT, t.tid) != 0)
      t.gone = true;
    else
      t.interrupted = true;
  }
  uint64_t deadline = NowNs() + kStopWaitNs;
  for (Tracee& t : tracees_)
    if (&t != &borrowed) Release(t, deadline);
}

void Injection::ReleaseAll() {
  uint64_t deadline = NowNs() + kStopWaitNs;
  for (Tracee& t : tracees_)
    if (!t.gone && !t.stopped && !t.interrupted && Ptrace(PTRACE_INTERRUPT, t.tid) == 0) t.interrupted = true;
  for (Tracee& t : tracees_) Release(t, deadline);
  RemoveCopy();
}

void Injection::Linger() {
  for (;;) {
    bool waiting = false;
    for (Tracee& t : tracees_) {
      if (t.gone || !(t.armed || t.saved || t.trap_queued)) continue;
      waiting = true;
      if (AwaitStop(t, NowNs())) Release(t, NowNs() + kStopWaitNs);  // stopped at last, or gone
    }
    if (!waiting) return;
    usleep(kLingerPollNs / 1000);
  }
}

// Calls function(arg0, arg1) on the borrowed, stopped thread `t`, whose
// stack at `sp` holds a return address of 0; its value (rax) once it
// returns there. `announce`: the test's kInCall step, while it runs.
StatusOr<uint64_t> Injection::Call(Tracee& t, uint64_t sp, uint64_t function, uint64_t arg0, uint64_t arg1,
                                   bool announce) {
  user_regs_struct regs = *t.saved;
  regs.rip = function;
  regs.rsp = sp;
  regs.rdi = arg0;
  regs.rsi = arg1;
  regs.rax = 0;
  regs.orig_rax = static_cast<unsigned long long>(-1);  // not in a syscall: nothing to restart
  if (ptrace(PTRACE_SETREGS, t.tid, nullptr, &regs) != 0)
    return Status::Error("cannot set thread " + std::to_string(t.tid) + "'s registers: " + ErrorText(errno));
  Resume(t, 0);
  if (announce) Step(InjectStep::kInCall);
  uint64_t deadline = NowNs() + r_.call_timeout_ns;
  for (;;) {
    Stop s = WaitStop(t.tid, deadline);
    if (s.kind == Stop::kGone) {
      t.gone = true;
      return Status::Error(Where() + " exited during the injection");
    }
    if (s.kind == Stop::kNone) {
      // Abandoned: Release interrupts it and puts it back where it was
      // borrowed, whatever the call held (see README: --inject-cupti).
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
    t.group_stopped = s.kind == Stop::kEvent && IsGroupStopSignal(s.signal);
    Resume(t, s.kind == Stop::kSignal ? s.signal : 0);
  }
}

// The borrowed thread's errno: where it is (its own __errno_location) and
// its value, put back with the registers.
Status Injection::SaveErrno(Tracee& t, uint64_t sp) {
  if (!functions_.errno_location) return Status::Ok();
  StatusOr<uint64_t> address = Call(t, sp, functions_.errno_location, 0, 0);
  if (!address.ok()) return address.status();
  if (*address && ReadRemote(static_cast<pid_t>(r_.pid), *address, &t.saved_errno, sizeof(t.saved_errno)))
    t.errno_address = *address;
  return Status::Ok();
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

void Injection::RemoveCopy() {
  if (copy_removed_ || r_.copy_dir_fd < 0 || r_.copy_name.empty()) return;
  unlinkat(r_.copy_dir_fd, r_.copy_name.c_str(), 0);
  copy_removed_ = true;
}

StatusOr<InjectResult> Injection::Run() {
  Status status = Seize();
  if (status.ok()) status = StopAll();
  if (!status.ok()) return status;
  // A tid reused by another process' thread between listing and seizing:
  // let go untouched.
  for (Tracee& t : tracees_)
    if (t.foreign) Release(t, NowNs() + kStopWaitNs);
  Step(InjectStep::kStopped);
  if (channel_.OwnerGone()) return Status::Error("no one waits for the injection into " + Where());
  for (Tracee& t : tracees_)
    if (status.ok() && !t.gone) status = Arm(t);
  if (!status.ok()) return status;
  for (Tracee& t : tracees_)
    if (!t.gone) Resume(t, t.stop_signal);  // a signal that came with the stop goes on now
  Step(InjectStep::kArmed);
  StatusOr<Tracee*> hit = AwaitSafePoint();
  if (!hit.ok()) return hit.status();
  Tracee& borrowed = **hit;
  ReleaseOthers(borrowed);

  user_regs_struct regs{};
  if (ptrace(PTRACE_GETREGS, borrowed.tid, nullptr, &regs) != 0)
    return Status::Error("cannot read thread " + std::to_string(borrowed.tid) + "'s registers: " + ErrorText(errno));
  std::vector<uint8_t> xstate(kXstateBytes);
  iovec iov{xstate.data(), xstate.size()};
  if (ptrace(PTRACE_GETREGSET, borrowed.tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov) != 0)
    return Status::Error("cannot read thread " + std::to_string(borrowed.tid) + "'s FP state: " + ErrorText(errno));
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
    return Status::Error("cannot write to thread " + std::to_string(borrowed.tid) + "'s stack: " + ErrorText(errno));
  uint64_t library = strings, function = strings + r_.library.size() + 1;
  uint64_t argument = function + r_.function.size() + 1;

  uint64_t borrowed_at = NowNs();
  status = SaveErrno(borrowed, sp);
  if (!status.ok()) return status;
  StatusOr<uint64_t> handle = Call(borrowed, sp, functions_.dlopen, library, RTLD_NOW, true);
  RemoveCopy();  // loaded or not, its path is no longer needed (the mapping stays)
  if (!handle.ok()) return handle.status();
  if (*handle == 0) {
    StatusOr<uint64_t> message = Call(borrowed, sp, functions_.dlerror, 0, 0);
    std::string why = message.ok() ? ReadString(*message) : "";
    return Status::Error("dlopen(" + r_.library + ") failed in " + Where() + (why.empty() ? "" : ": " + why));
  }
  // torchprobe gone: the library stays loaded, unused (a later run finds it).
  if (channel_.OwnerGone()) return Status::Error("no one waits for the injection into " + Where());
  StatusOr<uint64_t> address = Call(borrowed, sp, functions_.dlsym, *handle, function);
  if (!address.ok()) return address.status();
  if (*address == 0) return Status::Error(r_.library + " has no " + r_.function + " (an older build in " + Where() + "?)");
  StatusOr<uint64_t> value = Call(borrowed, sp, *address, argument, 0);
  if (!value.ok()) return value.status();
  // An int: the upper half of rax is not the function's.
  InjectResult result{static_cast<uint32_t>(borrowed.tid), static_cast<int32_t>(*value), NowNs() - borrowed_at};
  Step(InjectStep::kReleasing);
  Release(borrowed, NowNs() + kStopWaitNs);
  return result;
}

// The helper's answer: "ok TID VALUE NS" or "error MESSAGE".
std::string EncodeAnswer(const StatusOr<InjectResult>& result) {
  if (!result.ok()) return "error " + result.status().message();
  return "ok " + std::to_string(result->tid) + " " + std::to_string(result->value) + " " +
         std::to_string(result->borrowed_ns);
}

StatusOr<InjectResult> DecodeAnswer(const std::string& answer) {
  if (answer.rfind("error ", 0) == 0) return Status::Error(answer.substr(6));
  InjectResult result;
  char* end = nullptr;
  const char* text = answer.c_str();
  if (answer.rfind("ok ", 0) == 0) {
    result.tid = static_cast<uint32_t>(std::strtoul(text + 3, &end, 10));
    result.value = std::strtoll(end, &end, 10);
    result.borrowed_ns = std::strtoull(end, &end, 10);
    if (*end == '\0') return result;
  }
  return Status::Error("the injection's helper answered '" + answer + "'");
}

}  // namespace

StatusOr<InjectResult> InjectLibrary(const InjectRequest& request) {
  if (request.safe_points.empty() || request.safe_points.size() > 4)
    return Status::Error("inject: 1 to 4 safe points (debug registers), not " +
                         std::to_string(request.safe_points.size()));
  if (!request.dlopen || !request.dlsym || !request.dlerror)
    return Status::Error("inject: the target's dlopen, dlsym and dlerror were not given");
  Functions functions{request.dlopen, request.dlsym, request.dlerror, request.errno_location};

  HelperOptions options;
  options.what = "the injection into process " + std::to_string(request.pid);
  if (request.copy_dir_fd >= 0) options.keep_fds.push_back(request.copy_dir_fd);
  // Everything the helper waits for before it answers, and a margin: the
  // stops (seizing, letting go, the borrowed thread's), the safe point, the
  // four calls.
  options.answer_timeout_ns = 4 * kStopWaitNs + request.safe_point_timeout_ns + 4 * request.call_timeout_ns;
  StatusOr<std::string> answer = RunDetachedHelper(
      [&](HelperChannel& channel) {
        Injection injection(request, functions, channel);
        StatusOr<InjectResult> result = injection.Run();
        injection.ReleaseAll();
        channel.Answer(EncodeAnswer(result));
        injection.Linger();
      },
      options);
  // The helper removes a copy after dlopen; here too, where it never ran
  // (a second unlink of its unique name finds nothing).
  if (request.copy_dir_fd >= 0 && !request.copy_name.empty())
    unlinkat(request.copy_dir_fd, request.copy_name.c_str(), 0);
  if (!answer.ok()) return answer.status();
  return DecodeAnswer(*answer);
}

}  // namespace torchprobe
