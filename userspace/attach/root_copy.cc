// A file copied into a target's /tmp with no path component followed; see
// the header.
#include "userspace/attach/root_copy.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "userspace/base/proc_maps.h"

namespace torchprobe {
namespace {

constexpr int kNameTries = 8;  // fresh random names tried where one exists

std::string ErrorText(int error) {
  const char* text = strerrordesc_np(error);
  return text ? text : "error " + std::to_string(error);
}

// The target's /tmp as a directory descriptor, nothing followed (glibc has
// no openat2 wrapper: the raw call). Before Linux 5.6, openat of the one
// component with O_NOFOLLOW resolves the same (no "..", nothing before it).
int OpenTmp(int root_fd) {
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, root_fd, "tmp", &how, sizeof(how));
  if (fd < 0 && errno == ENOSYS) fd = openat(root_fd, "tmp", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  return static_cast<int>(fd);
}

// Why /tmp could not be opened as a directory, in its owner's terms.
std::string WhyNoTmp(int root_fd, int error) {
  struct stat st;
  if (fstatat(root_fd, "tmp", &st, AT_SYMLINK_NOFOLLOW) != 0) return "it has no /tmp (" + ErrorText(errno) + ")";
  if (S_ISLNK(st.st_mode)) return "its /tmp is a symlink";
  if (!S_ISDIR(st.st_mode)) return "its /tmp is not a directory";
  return "cannot open its /tmp: " + ErrorText(error);
}

// Who may replace a file in `dir` before the target opens it: root, its
// owner, and, unless it is sticky, anyone who may write to it.
Status CheckTmp(int dir, uint32_t pid) {
  struct stat st;
  if (fstat(dir, &st) != 0) return Status::Error("cannot stat its /tmp: " + ErrorText(errno));
  uint32_t uid = ReadProcessUid(pid);
  if (st.st_uid != 0 && st.st_uid != uid)
    return Status::Error("its /tmp belongs to uid " + std::to_string(st.st_uid) + ", neither root nor its user");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
    return Status::Error("its /tmp is writable by others without the sticky bit");
  return Status::Ok();
}

std::string RandomName(std::string_view prefix, std::string_view suffix) {
  unsigned char bytes[16] = {};
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0)
      got += static_cast<size_t>(n);
    else if (errno != EINTR)
      break;
  }
  static const char kHex[] = "0123456789abcdef";
  std::string name(prefix);
  for (unsigned char b : bytes) {
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  return name.append(suffix);
}

bool CopyAll(int from, int to) {
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = read(from, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = write(to, buffer + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      done += w;
    }
  }
}

}  // namespace

StatusOr<std::unique_ptr<RootCopy>> RootCopy::Make(uint32_t pid, const std::string& from, std::string_view prefix,
                                                   std::string_view suffix) {
  int source = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (source < 0) return Status::Error("cannot read " + from + ": " + ErrorText(errno));
  int root = open(("/proc/" + std::to_string(pid) + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) {
    int error = errno;
    close(source);
    return Status::Error("cannot open its root: " + ErrorText(error));
  }
  int dir = OpenTmp(root);
  Status status = dir < 0 ? Status::Error(WhyNoTmp(root, errno)) : CheckTmp(dir, pid);
  close(root);
  std::string name;
  int copy = -1;
  for (int tries = 0; status.ok() && copy < 0 && tries < kNameTries; ++tries) {
    name = RandomName(prefix, suffix);
    copy = openat(dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (copy < 0 && errno != EEXIST) status = Status::Error("cannot create a file in its /tmp: " + ErrorText(errno));
  }
  if (status.ok() && copy < 0)
    status = Status::Error("no free name in its /tmp after " + std::to_string(kNameTries) + " tries");
  if (status.ok() && (!CopyAll(source, copy) || fchmod(copy, 0444) != 0))
    status = Status::Error("cannot write the copy in its /tmp: " + ErrorText(errno));
  if (copy >= 0 && close(copy) != 0 && status.ok())
    status = Status::Error("cannot write the copy in its /tmp: " + ErrorText(errno));
  close(source);
  if (!status.ok()) {
    if (copy >= 0) unlinkat(dir, name.c_str(), 0);
    if (dir >= 0) close(dir);
    return status;
  }
  return std::unique_ptr<RootCopy>(new RootCopy(dir, std::move(name)));
}

RootCopy::~RootCopy() {
  unlinkat(dir_fd_, name_.c_str(), 0);
  close(dir_fd_);
}

}  // namespace torchprobe
