// Appends JSON tokens to a string: escaped strings (valid UTF-8 out, control
// characters as \u00XX), integers, and microseconds with nanosecond digits.
// The JSON writers build one event or node at a time here, then hand it to
// their AtomicFile, so no writer ever holds more than one record.
#ifndef TORCHPROBE_EXPORT_JSON_TEXT_H
#define TORCHPROBE_EXPORT_JSON_TEXT_H

#include <cstdint>
#include <string>
#include <string_view>

namespace torchprobe {

class JsonText {
 public:
  JsonText& Raw(std::string_view text) {
    out_.append(text);
    return *this;
  }
  JsonText& String(std::string_view text);
  JsonText& UInt(uint64_t value);
  JsonText& Int(int64_t value);
  // ns as microseconds, e.g. 1234567 -> 1234.567 (Chrome JSON's unit).
  JsonText& Micros(uint64_t ns);
  // `"key": ` (a space after the colon: some readers match keys by text).
  JsonText& Key(std::string_view key) { return String(key).Raw(": "); }

  const std::string& str() const { return out_; }
  size_t size() const { return out_.size(); }
  void clear() { out_.clear(); }

 private:
  std::string out_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_JSON_TEXT_H
