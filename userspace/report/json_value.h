// A small JSON reader for `report` on our own JSON traces: parses a whole
// document into a tree of values (objects keep their members in order).
// Numbers keep their text's value as a double and, when integral, as an
// exact int64. Strings are unescaped (\uXXXX to UTF-8, surrogate pairs
// joined). Errors are one line with the byte offset.
#ifndef TORCHPROBE_REPORT_JSON_VALUE_H
#define TORCHPROBE_REPORT_JSON_VALUE_H

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torchprobe {

struct JsonValue {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool boolean = false;
  double number = 0;
  int64_t integer = 0;  // == number when the text was an integer
  std::string string;
  std::vector<JsonValue> items;                            // kArray
  std::vector<std::pair<std::string, JsonValue>> members;  // kObject

  // The member named `key`, or nullptr (also when this is not an object).
  const JsonValue* Find(std::string_view key) const;
};

// Parses `text` (one value, whitespace around it allowed).
bool ParseJson(std::string_view text, JsonValue* value, std::string* error);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_JSON_VALUE_H
