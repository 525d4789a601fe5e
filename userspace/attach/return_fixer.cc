// The keeper's ptrace half of the uretprobe returns route; see the header.
#include "userspace/attach/return_fixer.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/signalfd.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "userspace/base/proc_maps.h"

namespace torchprobe {
namespace {

// New threads and forked children are traced from their first instruction:
// a child inherits the parent's pending returns and, with uprobe_multi
// links, its breakpoints (fork copies the patched pages), so its ops get
// trampolines too. At exec there is nothing left to guard.
constexpr long kOptions = PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEEXEC;

bool IsStopSignal(int sig) {
  return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1'000'000;
}

}  // namespace

ReturnFixer::~ReturnFixer() {
  if (fixes_fd_ >= 0) close(fixes_fd_);
  if (list_prog_fd_ >= 0) close(list_prog_fd_);
  if (signal_fd_ >= 0) close(signal_fd_);
}

void ReturnFixer::SetBpf(int fixes_fd, int list_prog_fd) {
  if (fixes_fd_ < 0 && fixes_fd >= 0) fixes_fd_ = fcntl(fixes_fd, F_DUPFD_CLOEXEC, 0);
  if (list_prog_fd_ < 0 && list_prog_fd >= 0) list_prog_fd_ = fcntl(list_prog_fd, F_DUPFD_CLOEXEC, 0);
}

std::string ReturnFixer::Seize(pid_t pid) {
  if (fixes_fd_ < 0 || list_prog_fd_ < 0) return "the BPF programs for it are not loaded";
  if (signal_fd_ < 0) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    signal_fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signal_fd_ < 0) return std::string("signalfd: ") + std::strerror(errno);
  }
  // Threads may start while we go: list again until every one is ours (the
  // ones started by a traced thread are ours anyway, by TRACECLONE).
  for (int round = 0; round < 100; ++round) {
    bool added = false;
    for (uint32_t tid : ListThreads(static_cast<uint32_t>(pid))) {
      pid_t t = static_cast<pid_t>(tid);
      if (threads_.count(t)) continue;
      if (ptrace(PTRACE_SEIZE, t, nullptr, kOptions) != 0) {
        int err = errno;
        if (err == ESRCH) continue;  // the thread ended meanwhile
        // A thread a seized thread just started is ours already (TRACECLONE)
        // before its clone event has been read: seizing it again is EPERM.
        if (err == EPERM && ReadTracerPid(tid) == static_cast<uint32_t>(getpid())) {
          threads_[t].pid = pid;
          added = true;
          continue;
        }
        uint32_t tracer = err == EPERM ? ReadTracerPid(tid) : 0;
        std::string why = err != EPERM ? std::string("ptrace: ") + std::strerror(err)
                          : tracer    ? "it is already traced by " + DescribeTracer(tracer)
                                      : "it cannot be ptraced (EPERM)";
        for (auto it = threads_.begin(); it != threads_.end();) {  // undo this pid
          if (it->second.pid == pid) {
            ptrace(PTRACE_DETACH, it->first, nullptr, nullptr);
            it = threads_.erase(it);
          } else {
            ++it;
          }
        }
        return why;
      }
      threads_[t].pid = pid;
      added = true;
    }
    if (!added) break;
  }
  if (!Tracing(pid)) return "it has exited";
  return "";
}

std::vector<int> ReturnFixer::fds() const {
  std::vector<int> fds;
  for (int fd : {fixes_fd_, list_prog_fd_, signal_fd_})
    if (fd >= 0) fds.push_back(fd);
  return fds;
}

bool ReturnFixer::Tracing(pid_t pid) const {
  for (const auto& [tid, thread] : threads_)
    if (thread.pid == pid) return true;
  return false;
}

void ReturnFixer::Prune() {
  for (auto it = threads_.begin(); it != threads_.end();) {
    char state = ReadProcessState(static_cast<uint32_t>(it->first));
    if (it->second.pid <= 0 || state == 0 || state == 'Z' || state == 'X') it = threads_.erase(it);
    else ++it;
  }
}

std::vector<pid_t> ReturnFixer::pids() {
  Prune();
  std::set<pid_t> pids;
  for (const auto& [tid, thread] : threads_) pids.insert(thread.pid);
  return {pids.begin(), pids.end()};
}

void ReturnFixer::OnChildEvents() {
  if (signal_fd_ >= 0) {
    signalfd_siginfo info;
    while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
    }
  }
  for (;;) {
    int status = 0;
    pid_t tid = waitpid(-1, &status, __WALL | WNOHANG);
    if (tid <= 0) return;
    HandleStop(tid, status);
  }
}

void ReturnFixer::Resume(pid_t tid, Thread& thread, int signal) {
  if (releasing_ != 0 && thread.pid == releasing_) {
    thread.stopped = true;  // held: Release lets it go with its signal
    thread.pending_signal = signal;
    return;
  }
  ptrace(PTRACE_CONT, tid, nullptr, reinterpret_cast<void*>(static_cast<intptr_t>(signal)));
}

void ReturnFixer::HandleStop(pid_t tid, int status) {
  auto it = threads_.find(tid);
  if (WIFEXITED(status) || WIFSIGNALED(status)) {
    if (it != threads_.end()) threads_.erase(it);
    return;
  }
  if (!WIFSTOPPED(status)) return;
  if (it == threads_.end()) {
    // A thread started by a traced one may report before its parent's
    // clone event: it belongs to the same process.
    uint32_t tgid = ReadThreadGroup(static_cast<uint32_t>(tid));
    it = threads_.emplace(tid, Thread{static_cast<pid_t>(tgid), false, 0}).first;
    // A forked child reporting before its parent's fork event: still
    // stopped at birth, so its probe goes on before it runs.
    if (tgid == static_cast<uint32_t>(tid) && on_fork_) on_fork_(tid);
  }
  Thread& thread = it->second;
  int sig = WSTOPSIG(status);
  int event = status >> 16;
  if (event == PTRACE_EVENT_CLONE || event == PTRACE_EVENT_FORK) {
    unsigned long child = 0;
    if (ptrace(PTRACE_GETEVENTMSG, tid, nullptr, &child) == 0 && !threads_.count(child)) {
      threads_[static_cast<pid_t>(child)].pid =
          event == PTRACE_EVENT_FORK ? static_cast<pid_t>(child) : thread.pid;
      if (event == PTRACE_EVENT_FORK && on_fork_) on_fork_(static_cast<pid_t>(child));
    }
    Resume(tid, thread, 0);
    return;
  }
  if (event == PTRACE_EVENT_EXEC) {
    // A new program: no trampolines, no breakpoints of ours. The threads
    // other than this one are gone (reported as exits).
    pid_t pid = thread.pid;
    if (releasing_ == pid) {
      Resume(tid, thread, 0);
      return;
    }
    for (auto other = threads_.begin(); other != threads_.end();) {
      if (other->second.pid == pid && other->first != tid) other = threads_.erase(other);
      else ++other;
    }
    threads_.erase(tid);
    ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
    return;
  }
  if (event == PTRACE_EVENT_STOP) {
    if (IsStopSignal(sig) && !(releasing_ != 0 && thread.pid == releasing_)) {
      // A job-control stop: stay stopped as without us, but keep listening.
      ptrace(PTRACE_LISTEN, tid, nullptr, nullptr);
      return;
    }
    if (IsStopSignal(sig)) {
      thread.stopped = true;  // group-stopped: detaching leaves it so
      thread.pending_signal = 0;
      return;
    }
    Resume(tid, thread, 0);  // our interrupt, or a new thread's first stop
    return;
  }
  if (event != 0) {
    Resume(tid, thread, 0);
    return;
  }
  // A signal about to be delivered.
  if ((sig == SIGURG || sig == SIGSTOP) && Fix(tid, sig)) {
    Resume(tid, thread, 0);  // ours: suppressed
    return;
  }
  Resume(tid, thread, sig);
}

bool ReturnFixer::Fix(pid_t tid, int signal) {
  uint32_t key = static_cast<uint32_t>(tid);
  tp_return_slots request;
  if (fixes_fd_ < 0 || bpf_map_lookup_elem(fixes_fd_, &key, &request) != 0) return false;
  if (static_cast<int>(request.signal) != signal) return false;
  bpf_map_delete_elem(fixes_fd_, &key);
  slots_fixed_ += GiveBack(tid, request);
  ++fixes_;
  return true;
}

size_t ReturnFixer::GiveBack(pid_t pid, const tp_return_slots& slots) {
  size_t written = 0;
  for (uint32_t i = 0; i < slots.count && i < TP_MAX_RETURNS; ++i) {
    uint64_t value = 0;
    iovec local = {&value, sizeof(value)};
    iovec remote = {reinterpret_cast<void*>(slots.slot[i]), sizeof(value)};
    if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != sizeof(value)) continue;
    if (value != slots.trampoline) continue;  // returned, or reused since: not ours
    value = slots.orig[i];
    if (process_vm_writev(pid, &local, 1, &remote, 1, 0) == sizeof(value)) ++written;
  }
  return written;
}

bool ReturnFixer::StopAll(pid_t pid) {
  Prune();
  releasing_ = pid;
  for (auto& [tid, thread] : threads_)
    if (thread.pid == pid && !thread.stopped) ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr);
  uint64_t deadline = NowMs() + 2000;
  for (;;) {
    bool all = true;
    for (const auto& [tid, thread] : threads_)
      if (thread.pid == pid && !thread.stopped) all = false;
    if (all) return true;
    if (NowMs() > deadline) return false;
    Prune();
    int status = 0;
    pid_t tid = waitpid(-1, &status, __WALL | WNOHANG);
    if (tid > 0) {
      HandleStop(tid, status);
    } else {
      usleep(200);
    }
  }
}

bool ReturnFixer::Release(pid_t pid) {
  if (!Tracing(pid)) return true;
  if (!StopAll(pid)) {
    // Some thread would not stop (uninterruptible): let them all run, later.
    for (auto& [tid, thread] : threads_) {
      if (thread.pid != pid || !thread.stopped) continue;
      thread.stopped = false;
      ptrace(PTRACE_CONT, tid, nullptr,
             reinterpret_cast<void*>(static_cast<intptr_t>(thread.pending_signal)));
    }
    releasing_ = 0;
    return false;
  }
  // Every thread is stopped: the kernel's lists are still.
  union bpf_iter_link_info info = {};
  info.task.pid = static_cast<uint32_t>(pid);
  LIBBPF_OPTS(bpf_link_create_opts, opts, .iter_info = &info, .iter_info_len = sizeof(info));
  int link = bpf_link_create(list_prog_fd_, 0, BPF_TRACE_ITER, &opts);
  int iter = link >= 0 ? bpf_iter_create(link) : -1;
  if (iter >= 0) {
    tp_return_slots slots;
    while (read(iter, &slots, sizeof(slots)) == sizeof(slots)) slots_fixed_ += GiveBack(pid, slots);
    close(iter);
  }
  if (link >= 0) close(link);
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (it->second.pid != pid) {
      ++it;
      continue;
    }
    ptrace(PTRACE_DETACH, it->first, nullptr,
           reinterpret_cast<void*>(static_cast<intptr_t>(it->second.pending_signal)));
    it = threads_.erase(it);
  }
  releasing_ = 0;
  return true;
}

}  // namespace torchprobe
