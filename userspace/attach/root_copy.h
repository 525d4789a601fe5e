// A copy of one of torchprobe's files in a target's /tmp, for a target in
// its own root (a container, a chroot) that cannot open it by our path
// (--inject-cupti's collector). torchprobe writes it as root into a
// directory the target's owner controls, so no path component may be
// redirected: /tmp is opened with openat2 in the target's root
// (/proc/PID/root, RESOLVE_IN_ROOT: no ".." or absolute symlink escapes it)
// without following any symlink (RESOLVE_NO_SYMLINKS | NO_MAGICLINKS), and
// must be a real directory owned by root or by the target's user, and not
// writable by others unless sticky (no one else may swap the copy before
// the target opens it). The copy gets a fresh random name, created
// O_CREAT | O_EXCL | O_NOFOLLOW in that directory, so nothing that was
// there (a symlink to /etc/shadow, another run's file) is ever opened:
// parallel injections into one container never share a file. It is
// complete before its name is handed out, readable by every user (0444),
// and removed by name in that directory.
#ifndef TORCHPROBE_ATTACH_ROOT_COPY_H
#define TORCHPROBE_ATTACH_ROOT_COPY_H

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "userspace/base/status.h"

namespace torchprobe {

class RootCopy {
 public:
  // Copies `from` into PID's /tmp as PREFIX<random>SUFFIX; an error says
  // why not in a few words ("its /tmp is a symlink").
  static StatusOr<std::unique_ptr<RootCopy>> Make(uint32_t pid, const std::string& from, std::string_view prefix,
                                                  std::string_view suffix);
  ~RootCopy();  // removes the copy (if still there)
  RootCopy(const RootCopy&) = delete;
  RootCopy& operator=(const RootCopy&) = delete;

  const std::string& path() const { return path_; }  // as the target sees it: /tmp/NAME
  int dir_fd() const { return dir_fd_; }             // its /tmp
  const std::string& name() const { return name_; }

 private:
  RootCopy(int dir_fd, std::string name) : dir_fd_(dir_fd), name_(std::move(name)), path_("/tmp/" + name_) {}
  int dir_fd_;
  std::string name_;
  std::string path_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_ROOT_COPY_H
