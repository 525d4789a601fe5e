#include "userspace/base/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <utility>

namespace torchprobe {
namespace {

constexpr size_t kBufferSize = 1 << 20;

std::string CannotWrite(const std::string& path, int err) {
  return "cannot write " + path + ": " + strerror(err);
}

mode_t g_mode = kDefaultOutputMode;

}  // namespace

void SetOutputFileMode(mode_t mode) { g_mode = mode; }
mode_t OutputFileMode() { return g_mode; }

bool ParseFileMode(const std::string& text, mode_t* mode) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("01234567") != std::string::npos) return false;
  unsigned long value = std::strtoul(text.c_str(), nullptr, 8);
  if ((value & ~0666ul) || (value & 0600) != 0600) return false;
  *mode = static_cast<mode_t>(value);
  return true;
}

std::unique_ptr<AtomicFile> AtomicFile::Open(const std::string& path, std::string* error) {
  if (path.empty()) {
    *error = "cannot write an empty path";
    return nullptr;
  }
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    *error = CannotWrite(path, EISDIR);
    return nullptr;
  }
  int dir_fd = open(dir.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC);
  if (dir_fd < 0) {
    *error = CannotWrite(path, errno);
    return nullptr;
  }
  std::unique_ptr<AtomicFile> file = OpenAt(dir_fd, name, path, error);
  close(dir_fd);
  return file;
}

std::unique_ptr<AtomicFile> AtomicFile::OpenAt(int dir_fd, const std::string& name, const std::string& shown,
                                               std::string* error) {
  struct stat st;
  if (fstatat(dir_fd, name.c_str(), &st, 0) == 0 && S_ISDIR(st.st_mode)) {
    *error = CannotWrite(shown, EISDIR);
    return nullptr;
  }
  int own_dir = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (own_dir < 0) {
    *error = CannotWrite(shown, errno);
    return nullptr;
  }
  int fd = openat(own_dir, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  std::string temp;
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // No O_TMPFILE here: a fresh name beside the destination, made only if
    // nothing holds it (no file, no symlink).
    std::random_device random;
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
      char suffix[16];
      snprintf(suffix, sizeof(suffix), "%08x", random());
      temp = name + ".tmp." + suffix;
      fd = openat(own_dir, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0 && errno != EEXIST) break;
    }
  }
  if (fd < 0) {
    *error = CannotWrite(shown, errno);
    close(own_dir);
    return nullptr;
  }
  fchmod(fd, g_mode);  // exactly the mode asked for, whatever the umask
  return std::unique_ptr<AtomicFile>(new AtomicFile(shown, name, own_dir, std::move(temp), fd));
}

AtomicFile::AtomicFile(std::string path, std::string name, int dir_fd, std::string temp_name, int fd)
    : path_(std::move(path)),
      name_(std::move(name)),
      dir_fd_(dir_fd),
      temp_name_(std::move(temp_name)),
      fd_(fd),
      buffer_(kBufferSize) {}

AtomicFile::~AtomicFile() {
  Abort();
  if (dir_fd_ >= 0) close(dir_fd_);
}

void AtomicFile::SetError(const char* what, int err) {
  if (!error_.empty()) return;
  error_ = CannotWrite(path_, err);
  if (what && *what) error_ += std::string(" (") + what + ")";
}

bool AtomicFile::WriteAll(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      SetError("", errno);
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
    bytes_written_ += static_cast<uint64_t>(n);
  }
  return true;
}

bool AtomicFile::Flush() {
  if (buffered_ == 0) return ok();
  bool written = WriteAll(buffer_.data(), buffered_);
  buffered_ = 0;
  return written;
}

bool AtomicFile::Write(const void* data, size_t size) {
  if (fd_ < 0 || !ok()) {
    if (ok()) error_ = "cannot write " + path_ + ": file already closed";
    return false;
  }
  if (buffered_ + size <= buffer_.size()) {
    std::memcpy(buffer_.data() + buffered_, data, size);
    buffered_ += size;
    return true;
  }
  if (!Flush()) return false;
  if (size >= buffer_.size()) return WriteAll(data, size);
  std::memcpy(buffer_.data(), data, size);
  buffered_ = size;
  return true;
}

// Links the anonymous file in under a fresh temp name, so that rename() can
// then replace the destination atomically (linkat cannot overwrite).
bool AtomicFile::NameAnonymousFile() {
  std::string proc_fd = "/proc/self/fd/" + std::to_string(fd_);
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    char suffix[16];
    snprintf(suffix, sizeof(suffix), "%08x", random());
    std::string temp = name_ + ".tmp." + suffix;
    if (linkat(AT_FDCWD, proc_fd.c_str(), dir_fd_, temp.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      temp_name_ = temp;
      return true;
    }
    if (errno != EEXIST) break;
  }
  SetError("link", errno);
  return false;
}

bool AtomicFile::Commit(std::string* error) {
  if (closed_) {  // aborted or committed before
    if (error) *error = "cannot write " + path_ + ": file already closed";
    return false;
  }
  if (fd_ >= 0 && ok()) {
    if (Flush() && fsync(fd_) != 0) SetError("fsync", errno);
    if (ok() && temp_name_.empty()) NameAnonymousFile();
  }
  if (fd_ >= 0 && close(fd_) != 0) SetError("close", errno);
  fd_ = -1;
  if (ok() && !temp_name_.empty() && renameat(dir_fd_, temp_name_.c_str(), dir_fd_, name_.c_str()) != 0) {
    SetError("rename", errno);
  }
  if (!ok()) {
    Abort();
    if (error) *error = error_;
    return false;
  }
  temp_name_.clear();  // committed: nothing left to remove
  closed_ = true;
  return true;
}

void AtomicFile::Abort() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!temp_name_.empty()) unlinkat(dir_fd_, temp_name_.c_str(), 0);
  temp_name_.clear();
  buffered_ = 0;
  closed_ = true;
}

}  // namespace torchprobe
