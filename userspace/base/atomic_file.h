// An output file that appears complete or not at all: bytes go to an unnamed
// O_TMPFILE in the destination's directory, given a name and renamed over the
// destination on Commit(), so even a SIGKILLed torchprobe leaves nothing
// behind. Where the filesystem lacks O_TMPFILE, a named temp file beside the
// destination (`<path>.tmp.XXXXXX`) is used and unlinked on Abort() or
// destruction. Writes are buffered; the first I/O
// error is kept as one line that names the path and strerror.
//
// Everything after the open goes through the destination folder's fd
// (linkat/renameat/unlinkat on names in it), so the folder cannot be swapped
// for another under a writer; OpenAt takes a folder the caller has checked.
//
// The file's mode is decided here, for every file torchprobe writes (traces,
// the agent's index, plan cache entries): 0600 unless the command line asks
// (--mode): a trace holds every traced process' command line and names.
#ifndef TORCHPROBE_BASE_ATOMIC_FILE_H
#define TORCHPROBE_BASE_ATOMIC_FILE_H

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torchprobe {

inline constexpr mode_t kDefaultOutputMode = 0600;
// The mode of the files written from now on (whatever the umask).
void SetOutputFileMode(mode_t mode);
mode_t OutputFileMode();
// "0640" and the like: octal, read/write bits only (no execute, no
// set-id), the owner's read and write included. False for anything else.
bool ParseFileMode(const std::string& text, mode_t* mode);

class AtomicFile {
 public:
  // Creates the temp file now, so an unwritable destination is reported
  // before any work ("cannot write x.pftrace: Permission denied").
  // Returns nullptr and sets *error on failure.
  static std::unique_ptr<AtomicFile> Open(const std::string& path, std::string* error);
  // `name` in the folder `dir_fd` (not taken: the file keeps its own copy);
  // `shown` names it in error lines.
  static std::unique_ptr<AtomicFile> OpenAt(int dir_fd, const std::string& name, const std::string& shown,
                                            std::string* error);

  ~AtomicFile();  // Abort() unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Buffered append. Returns false once any write has failed (see error()).
  bool Write(const void* data, size_t size);
  // Flushes, fsyncs, closes and renames onto the destination.
  bool Commit(std::string* error);
  // Closes and removes the temp file; the destination is left untouched.
  void Abort();

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  AtomicFile(std::string path, std::string name, int dir_fd, std::string temp_name, int fd);
  bool NameAnonymousFile();
  bool Flush();
  bool WriteAll(const void* data, size_t size);
  void SetError(const char* what, int err);

  std::string path_;       // for error lines
  std::string name_;       // in dir_fd_
  int dir_fd_ = -1;
  std::string temp_name_;  // in dir_fd_; "" while the file is anonymous (O_TMPFILE)
  int fd_ = -1;
  bool closed_ = false;    // committed or aborted
  std::vector<uint8_t> buffer_;
  size_t buffered_ = 0;
  uint64_t bytes_written_ = 0;
  std::string error_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_ATOMIC_FILE_H
