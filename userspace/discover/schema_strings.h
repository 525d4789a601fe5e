// The operator schema strings in an image's read-only data, indexed by the
// operator key ("sum.dim_IntList") they begin with. The linker merges a
// string into the tail of a longer one when it ends the same way, so
// "cos(Tensor self) -> Tensor" may exist only inside
// "acos(Tensor self) -> Tensor": every tail of a string's key is indexed
// too, with what precedes it, and op_names.h weighs the sightings.
#ifndef TORCHPROBE_DISCOVER_SCHEMA_STRINGS_H
#define TORCHPROBE_DISCOVER_SCHEMA_STRINGS_H

#include <string_view>
#include <unordered_map>
#include <vector>

#include "userspace/discover/elf_symbols.h"

namespace torchprobe {

struct SchemaSighting {
  std::string_view text;    // from the key to the NUL: "cos(Tensor self) -> Tensor"
  std::string_view prefix;  // what precedes it in its string: "" (a string's start), "a", "aten::"
};

class SchemaStringIndex {
 public:
  // Scans the image's read-only data sections (not code, not writable data).
  static SchemaStringIndex Build(const ElfImage& image);
  // Indexes the NUL-separated strings in `bytes` (for tests and Build).
  void AddStrings(std::string_view bytes);

  // Every sighting of `key` followed by "(", or nullptr.
  const std::vector<SchemaSighting>* Find(std::string_view key) const;
  size_t string_count() const { return string_count_; }

 private:
  std::unordered_map<std::string_view, std::vector<SchemaSighting>> by_key_;
  size_t string_count_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_SCHEMA_STRINGS_H
