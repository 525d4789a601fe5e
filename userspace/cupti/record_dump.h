// With $TORCHPROBE_CUPTI_DUMP=FILE, `record --cupti` also writes every
// record it receives, one a line, in the golden-stream text that
// tests/golden/*.txt use (tests/cupti_stream_text.h parses it): how a join
// problem seen on a GPU machine becomes a test on every machine. Kernel
// names stay mangled (one word, as the text needs; a byte that is not
// printable ASCII becomes '?'). The file appears whole at the end of the
// run, renamed over FILE (base/atomic_file.h): never written through a
// symlink someone left at FILE.
#ifndef TORCHPROBE_CUPTI_RECORD_DUMP_H
#define TORCHPROBE_CUPTI_RECORD_DUMP_H

#include <cstddef>
#include <cstdint>
#include <memory>

#include "userspace/base/atomic_file.h"
#include "userspace/cupti/record_stream.h"

namespace torchprobe {

class RecordDump {
 public:
  // Opens the file $TORCHPROBE_CUPTI_DUMP names, if set; a file that cannot
  // be opened is said on stderr once and nothing is written.
  RecordDump();
  ~RecordDump();  // the file appears (or why not, on stderr)
  RecordDump(const RecordDump&) = delete;
  RecordDump& operator=(const RecordDump&) = delete;

  // One whole record (its header says its type and size) that `pid` sent.
  void Write(uint32_t pid, const uint8_t* record, size_t size);

 private:
  void Line(const char* format, ...) __attribute__((format(printf, 2, 3)));
  void PutActivity(const tpc_activity& a);
  std::unique_ptr<AtomicFile> file_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_CUPTI_RECORD_DUMP_H
