#include "userspace/export/atomic_file.h"

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

// Read without umask(2), which would change it under other threads.
mode_t CurrentUmask() {
  mode_t mask = 022;
  if (FILE* f = fopen("/proc/self/status", "re")) {
    char line[256];
    unsigned value;
    while (fgets(line, sizeof(line), f)) {
      if (sscanf(line, "Umask: %o", &value) == 1) {
        mask = static_cast<mode_t>(value);
        break;
      }
    }
    fclose(f);
  }
  return mask;
}

}  // namespace

std::unique_ptr<AtomicFile> AtomicFile::Open(const std::string& path, std::string* error) {
  struct stat st;
  if (path.empty()) {
    *error = "cannot write an empty path";
    return nullptr;
  }
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    *error = CannotWrite(path, EISDIR);
    return nullptr;
  }
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  int fd = open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);  // umask applies
  if (fd >= 0) return std::unique_ptr<AtomicFile>(new AtomicFile(path, "", fd));
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
    *error = CannotWrite(path, errno);
    return nullptr;
  }
  std::string temp = path + ".tmp.XXXXXX";
  fd = mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) {
    *error = CannotWrite(path, errno);
    return nullptr;
  }
  // mkstemp makes 0600; a trace is an ordinary output file.
  fchmod(fd, 0666 & ~CurrentUmask());
  return std::unique_ptr<AtomicFile>(new AtomicFile(path, std::move(temp), fd));
}

AtomicFile::AtomicFile(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd), buffer_(kBufferSize) {}

AtomicFile::~AtomicFile() { Abort(); }

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
    std::string temp = path_ + ".tmp." + suffix;
    if (linkat(AT_FDCWD, proc_fd.c_str(), AT_FDCWD, temp.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      temp_path_ = temp;
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
    if (ok() && temp_path_.empty()) NameAnonymousFile();
  }
  if (fd_ >= 0 && close(fd_) != 0) SetError("close", errno);
  fd_ = -1;
  if (ok() && !temp_path_.empty() && rename(temp_path_.c_str(), path_.c_str()) != 0) {
    SetError("rename", errno);
  }
  if (!ok()) {
    Abort();
    if (error) *error = error_;
    return false;
  }
  temp_path_.clear();  // committed: nothing left to remove
  closed_ = true;
  return true;
}

void AtomicFile::Abort() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) unlink(temp_path_.c_str());
  temp_path_.clear();
  buffered_ = 0;
  closed_ = true;
}

}  // namespace torchprobe
