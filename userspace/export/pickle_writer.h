// Python's pickle format, protocol 2, for the few types a memory snapshot
// holds (dicts, lists, tuples, str, int, bool, None), written front to back:
// a container is opened, its items (a dict's as key, value, key, ...)
// follow, and it is closed. Strings that are not valid UTF-8 have their bad
// bytes replaced by '?' (an unpickler refuses them). No memo: nothing is
// shared, so nothing is referenced twice.
#ifndef TORCHPROBE_EXPORT_PICKLE_WRITER_H
#define TORCHPROBE_EXPORT_PICKLE_WRITER_H

#include <cstdint>
#include <string>
#include <string_view>

namespace torchprobe {

class PickleWriter {
 public:
  PickleWriter();  // the protocol header

  PickleWriter& Dict();
  PickleWriter& EndDict();
  PickleWriter& List();
  PickleWriter& EndList();
  PickleWriter& Tuple();
  PickleWriter& EndTuple();
  PickleWriter& Str(std::string_view text);
  PickleWriter& Int(int64_t value);
  PickleWriter& UInt(uint64_t value);
  PickleWriter& Bool(bool value);
  PickleWriter& None();
  // A dict's key (a str) and the value that follows.
  PickleWriter& Key(std::string_view key) { return Str(key); }

  // The whole pickle, STOP appended; the writer is spent.
  std::string Finish();

 private:
  std::string out_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_PICKLE_WRITER_H
