// Decoding a locations table; see the header.
#include "userspace/probe_sets/python/line_table.h"

namespace torchprobe {
namespace {

// CPython's varints: 6 bits a byte, least significant first, 0x40 set on
// every byte but the last.
class TableReader {
 public:
  explicit TableReader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return at_ >= bytes_.size(); }
  uint8_t Byte() { return done() ? 0 : static_cast<uint8_t>(bytes_[at_++]); }
  uint32_t Varint() {
    uint32_t read = Byte(), value = read & 63, shift = 0;
    while ((read & 64) && !done() && shift < 30) {
      read = Byte();
      shift += 6;
      value |= (read & 63) << shift;
    }
    return value;
  }
  int32_t Svarint() {
    uint32_t value = Varint();
    return (value & 1) ? -static_cast<int32_t>(value >> 1) : static_cast<int32_t>(value >> 1);
  }
  void Skip(size_t n) { at_ += n; }
  // Whether the byte at the cursor starts an entry (its high bit).
  bool AtEntry() const { return !done() && (static_cast<uint8_t>(bytes_[at_]) & 0x80); }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
};

}  // namespace

int PythonLine(std::string_view linetable, int first_line, int32_t lasti) {
  if (lasti < 0) return first_line;
  int64_t address = static_cast<int64_t>(lasti) * 2, start = 0;
  int line = first_line;
  TableReader table(linetable);
  while (table.AtEntry()) {
    uint8_t first = table.Byte();
    int code = (first >> 3) & 15;
    int64_t end = start + ((first & 7) + 1) * 2;
    bool has_line = true;
    if (code == 15) {
      has_line = false;  // no location
    } else if (code == 14) {
      line += table.Svarint();
      table.Varint();  // end line delta
      table.Varint();  // column + 1
      table.Varint();  // end column + 1
    } else if (code == 13) {
      line += table.Svarint();
    } else if (code >= 10) {
      line += code - 10;
      table.Skip(2);  // column, end column
    } else {
      table.Skip(1);  // columns
    }
    if (address >= start && address < end) return has_line ? line : -1;
    start = end;
    // Entries past a malformed one are not read: the cursor is not at one.
    while (!table.done() && !table.AtEntry()) table.Byte();
  }
  return -1;
}

}  // namespace torchprobe
