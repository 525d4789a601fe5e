// The output side both JSON writers share: records built in a JsonText,
// handed to an AtomicFile in 64 KiB chunks, and one Finish that ends the
// text and commits it (or says the trace was finished already).
#ifndef TORCHPROBE_EXPORT_JSON_TRACE_FILE_H
#define TORCHPROBE_EXPORT_JSON_TRACE_FILE_H

#include <memory>
#include <string>

#include "userspace/base/atomic_file.h"
#include "userspace/export/json_text.h"

namespace torchprobe {

class JsonTraceFile {
 public:
  explicit JsonTraceFile(std::unique_ptr<AtomicFile> file) : file_(std::move(file)) {}

  JsonText& text() { return text_; }
  // Hands the text over once a chunk has built up.
  void MaybeFlush() {
    if (text_.size() >= kFlushBytes) Flush();
  }
  // False, with *error set, if the trace was finished already.
  bool StartFinish(std::string* error) {
    if (!finished_) return finished_ = true;
    *error = "cannot write " + file_->path() + ": trace already finished";
    return false;
  }
  // Writes what is left and renames the file into place.
  bool Commit(std::string* error) {
    Flush();
    return file_->Commit(error);
  }
  uint64_t bytes_written() const { return file_->bytes_written(); }

 private:
  static constexpr size_t kFlushBytes = 1 << 16;
  void Flush() {
    file_->Write(text_.str().data(), text_.size());
    text_.clear();
  }

  std::unique_ptr<AtomicFile> file_;
  JsonText text_;
  bool finished_ = false;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_JSON_TRACE_FILE_H
