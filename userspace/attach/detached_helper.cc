// A helper process that outlives its owner; see the header.
#include "userspace/attach/detached_helper.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "userspace/base/clock.h"

namespace torchprobe {
namespace {

constexpr uint64_t kReapWaitNs = 1'000'000'000;  // a helper that answered exits within this

// Every signal stays blocked (set before the fork, never undone); those a
// terminal, a supervisor or a user sends are also ignored, so that none is
// left pending and none runs a handler of torchprobe's in the helper.
void IgnoreSignals() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU,
                  SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGPWR, SIGURG, SIGWINCH})
    sigaction(sig, &ignore, nullptr);
}

void LeaveOomKillerAlone() {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t ignored = write(fd, "-1000", 5);
  (void)ignored;
  close(fd);
}

// 0-2 onto /dev/null, every other descriptor but `keep` closed.
void CloseAllBut(std::vector<int> keep) {
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; ++fd)
    if (null_fd >= 0 && std::find(keep.begin(), keep.end(), fd) == keep.end()) dup2(null_fd, fd);
  std::sort(keep.begin(), keep.end());
  unsigned from = 3;
  for (int fd : keep) {
    if (fd < 0 || static_cast<unsigned>(fd) < from) continue;
    if (static_cast<unsigned>(fd) > from) close_range(from, static_cast<unsigned>(fd) - 1, 0);
    from = static_cast<unsigned>(fd) + 1;
  }
  close_range(from, ~0u, 0);
}

[[noreturn]] void RunHelper(const std::function<void(HelperChannel&)>& work, int channel_fd, std::vector<int> keep) {
  IgnoreSignals();
  LeaveOomKillerAlone();
  keep.push_back(channel_fd);
  CloseAllBut(keep);
  HelperChannel channel(channel_fd);
  work(channel);
  _exit(0);
}

}  // namespace

void HelperChannel::Answer(const std::string& answer) {
  if (fd_ < 0) return;
  uint32_t size = static_cast<uint32_t>(std::min(answer.size(), kMaxHelperAnswer));
  char message[sizeof(size) + kMaxHelperAnswer];
  std::memcpy(message, &size, sizeof(size));
  std::memcpy(message + sizeof(size), answer.data(), size);
  while (write(fd_, message, sizeof(size) + size) < 0 && errno == EINTR) {
  }
  close(fd_);
  fd_ = -1;
}

bool HelperChannel::OwnerGone() const {
  if (fd_ < 0) return true;
  // A pipe's writing end polls POLLERR once no reader is left.
  pollfd p{fd_, 0, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0;
}

StatusOr<std::string> RunDetachedHelper(const std::function<void(HelperChannel&)>& work, const HelperOptions& options) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return Status::Error("cannot start a helper for " + options.what + ": " + strerrordesc_np(errno));
  // Blocked across the forks: no signal reaches the children before the
  // helper ignores it.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  pid_t helper = fork();
  if (helper == 0) {
    close(fds[0]);
    setsid();
    RunHelper(work, fds[1], options.keep_fds);
  }
  int fork_error = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  close(fds[1]);
  if (helper < 0) {
    close(fds[0]);
    return Status::Error("cannot start a helper for " + options.what + ": " + strerrordesc_np(fork_error));
  }

  // The answer: its size, then its bytes, in one write.
  std::string got;
  uint64_t deadline = NowNs() + options.answer_timeout_ns;
  bool ended = false;
  for (;;) {
    uint32_t size = 0;
    if (got.size() >= sizeof(size)) {
      std::memcpy(&size, got.data(), sizeof(size));
      if (got.size() >= sizeof(size) + size) break;
    }
    uint64_t now = NowNs();
    if (ended || now >= deadline) break;
    pollfd p{fds[0], POLLIN, 0};
    int ready = poll(&p, 1, static_cast<int>(std::min<uint64_t>((deadline - now) / 1'000'000 + 1, 1000)));
    if (ready <= 0) continue;  // EINTR or not yet: the deadline decides
    char chunk[512];
    ssize_t n = read(fds[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      ended = true;
    else
      got.append(chunk, static_cast<size_t>(n));
  }
  close(fds[0]);
  // It exits once it has answered, unless it waits on for a thread (see
  // inject_library.h): reaped here, or by init once torchprobe is gone.
  for (uint64_t until = NowNs() + kReapWaitNs; waitpid(helper, nullptr, WNOHANG) == 0 && NowNs() < until;) usleep(1000);
  uint32_t size = 0;
  if (got.size() >= sizeof(size)) std::memcpy(&size, got.data(), sizeof(size));
  if (got.size() >= sizeof(size) && got.size() >= sizeof(size) + size) return got.substr(sizeof(size), size);
  if (ended) return Status::Error("the helper for " + options.what + " ended without an answer");
  return Status::Error("the helper for " + options.what + " did not answer in " +
                       std::to_string(options.answer_timeout_ns / 1'000'000'000) + " s (it goes on alone)");
}

}  // namespace torchprobe
