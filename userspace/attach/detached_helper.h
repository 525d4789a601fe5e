// Work on a target that must finish even if torchprobe dies meanwhile: run
// in a short-lived helper process that its owner's death cannot strand.
// The injector (inject_library) seizes a target's threads and sets their
// debug registers there; if the tracer died with them set (SIGKILL, the OOM
// killer, a crash), a tracer's exit would detach them armed and the target
// would die at its next trap. So the tracer is a helper:
//   - forked, not exec'd, so that the work is a function of the calling
//     binary (a test's observer included) with no command line to parse;
//     in a session of its own (setsid: no terminal's Ctrl-C or hangup, no
//     signal to torchprobe's process group). torchprobe may have other
//     threads at the fork (the CUPTI receiver's): the child runs only
//     system calls until its work, and that work uses malloc (glibc resets
//     its locks in a fork's child) and nothing else another thread could
//     have held: no stdio, no iostreams, no locale (strerrordesc_np, not
//     strerror). The owner reaps it once it has answered; orphaned, it is
//     init's (or a subreaper's);
//   - every signal blocked and the catchable ones ignored (SIGKILL alone
//     still ends it: a `kill -9` of its own pid, or of torchprobe's whole
//     cgroup, is the one way to strand its work), oom_score_adj -1000;
//   - its descriptors closed but the ones it needs (stdin/out/err to
//     /dev/null): it holds none of torchprobe's pipes or sockets;
//   - it answers over a pipe; the owner waits a bounded time for that
//     answer and goes on; the helper sees its owner gone (the pipe's reader
//     closed) and gives up early where its work allows.
#ifndef TORCHPROBE_ATTACH_DETACHED_HELPER_H
#define TORCHPROBE_ATTACH_DETACHED_HELPER_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

// The helper's end of its owner.
class HelperChannel {
 public:
  explicit HelperChannel(int fd) : fd_(fd) {}
  // Sends the answer (the first call only; up to kMaxHelperAnswer bytes):
  // the owner stops waiting.
  void Answer(const std::string& answer);
  // True once no one waits for an answer: the owner died, or has it.
  bool OwnerGone() const;

 private:
  int fd_;
};

constexpr size_t kMaxHelperAnswer = 3000;  // one pipe write (below PIPE_BUF): whole or not at all

struct HelperOptions {
  std::string what;                // names the work in errors ("the injection into process 42")
  std::vector<int> keep_fds;       // open in the helper besides its channel; the others are closed
  uint64_t answer_timeout_ns = 0;  // how long the owner waits for the answer
};

// Runs `work` in a helper (in the helper's memory: a copy of the caller's
// at the fork) and returns what it answered; an error (one line) when the
// helper could not start, ended without an answer, or did not answer in
// time (it then goes on alone).
StatusOr<std::string> RunDetachedHelper(const std::function<void(HelperChannel&)>& work, const HelperOptions& options);

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_DETACHED_HELPER_H
