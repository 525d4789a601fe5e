// Launch mode: the command is forked but held before exec until the probes
// that must see it from its first instruction are in place.
#ifndef TORCHPROBE_SESSION_TARGET_LAUNCHER_H
#define TORCHPROBE_SESSION_TARGET_LAUNCHER_H

#include <sys/types.h>

#include <string>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

// The executable execvp() would run for argv0, or an error naming it with
// *exit_code set as a shell would: 127 not found, 126 not executable.
StatusOr<std::string> ResolveCommand(const std::string& argv0, int* exit_code);

class TargetLauncher {
 public:
  ~TargetLauncher();
  // Forks; the child waits for Release() and then execs argv.
  Status Fork(const std::vector<std::string>& argv);
  // Lets the child exec. Fails (with the child's errno) if exec failed.
  Status Release();
  pid_t pid() const { return pid_; }
  // Reaps the child if it exited; true once it has. `status` gets its
  // wait status.
  bool Exited(int* status);

 private:
  pid_t pid_ = -1;
  int go_fd_ = -1;     // parent writes a byte: exec now
  int error_fd_ = -1;  // child writes errno if exec failed (close-on-exec)
  bool reaped_ = false;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_TARGET_LAUNCHER_H
