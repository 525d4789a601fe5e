// A file mapped read-only that no one else can use to crash or stall us: the
// ELF images torchprobe reads (libtorch is 100-500 MB) belong to the traced
// process, and often to the user who runs it.
//
// Opening: O_NONBLOCK, then fstat, and only a regular file is mapped. A FIFO
// (or a device) put where a library's name points would otherwise block the
// open, or the read, forever.
//
// Reading: a mapped file that is truncated while mapped raises SIGBUS at the
// next touch of a page past its new end, which would kill torchprobe as root
// (any user can truncate a file they own while a root reader has it mapped).
// Copying the file instead would cost its size in memory for every image
// open at once, per record; so the mapping stays and a SIGBUS handler, set up
// once per process, replaces each such page of a registered mapping by a
// page of zeros and marks the file cut short. Reads then see zeros, which
// every parser here already bounds-checks like any other bytes; the caller
// asks cut_short() and discards what it read. A SIGBUS outside our mappings
// goes to the handler that was there before (default: the process dies).
#ifndef TORCHPROBE_DISCOVER_MAPPED_FILE_H
#define TORCHPROBE_DISCOVER_MAPPED_FILE_H

#include <cstdint>
#include <memory>
#include <string>

#include "userspace/base/status.h"

namespace torchprobe {

class MappedFile {
 public:
  // "cannot open P: ...", "P is not a regular file", "P is empty".
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Private and writable (copy-on-write): libelf may convert in place.
  char* data() const { return data_; }
  uint64_t size() const { return size_; }
  // True once a page past the file's end was touched: it was truncated
  // while mapped, and what was read from it may be zeros.
  bool cut_short() const;

 private:
  MappedFile() = default;
  char* data_ = nullptr;
  uint64_t size_ = 0;
  int slot_ = -1;  // in the SIGBUS handler's table
};

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_MAPPED_FILE_H
