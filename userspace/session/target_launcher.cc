// fork + held exec; see the header.
#include "userspace/session/target_launcher.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace torchprobe {
namespace {

bool IsExecutableFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

StatusOr<std::string> ResolveCommand(const std::string& argv0, int* exit_code) {
  *exit_code = 127;
  if (argv0.empty()) return Status::Error("cannot run the command: it is empty");
  if (argv0.find('/') != std::string::npos) {
    if (IsExecutableFile(argv0)) return argv0;
    bool exists = access(argv0.c_str(), F_OK) == 0;
    if (exists) *exit_code = 126;
    return Status::Error("cannot run " + argv0 + ": " +
                         (exists ? "not an executable file" : std::strerror(ENOENT)));
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + argv0;
    if (IsExecutableFile(candidate)) return candidate;
    start = end + 1;
  }
  return Status::Error("cannot run " + argv0 + ": command not found");
}

TargetLauncher::~TargetLauncher() {
  if (go_fd_ >= 0) close(go_fd_);  // an unreleased child sees EOF and exits
  if (error_fd_ >= 0) close(error_fd_);
}

Status TargetLauncher::Fork(const std::vector<std::string>& argv) {
  int go[2], error[2];
  if (pipe2(go, O_CLOEXEC) != 0 || pipe2(error, O_CLOEXEC) != 0)
    return Status::Error(std::string("cannot create a pipe: ") + std::strerror(errno));
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) return Status::Error(std::string("cannot fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    close(go[1]);
    close(error[0]);
    char byte;
    if (read(go[0], &byte, 1) != 1) _exit(127);  // torchprobe gave up before exec
    execvp(args[0], args.data());
    int err = errno;
    (void)!write(error[1], &err, sizeof(err));
    _exit(127);
  }
  close(go[0]);
  close(error[1]);
  go_fd_ = go[1];
  error_fd_ = error[0];
  return Status::Ok();
}

Status TargetLauncher::Release() {
  char byte = 1;
  if (write(go_fd_, &byte, 1) != 1)
    return Status::Error(std::string("cannot start the command: ") + std::strerror(errno));
  close(go_fd_);
  go_fd_ = -1;
  int err = 0;
  ssize_t n = read(error_fd_, &err, sizeof(err));  // EOF (0) once exec succeeded
  close(error_fd_);
  error_fd_ = -1;
  if (n == sizeof(err)) return Status::Error(std::string("cannot run the command: ") + std::strerror(err));
  return Status::Ok();
}

bool TargetLauncher::Exited(int* status) {
  if (pid_ <= 0 || reaped_) return true;
  int wstatus = 0;
  pid_t r = waitpid(pid_, &wstatus, WNOHANG);
  if (r == pid_ && (WIFEXITED(wstatus) || WIFSIGNALED(wstatus))) {
    reaped_ = true;
    if (status) *status = wstatus;
    return true;
  }
  return r < 0 && errno == ECHILD;
}

}  // namespace torchprobe
