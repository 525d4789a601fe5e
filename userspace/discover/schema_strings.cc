// Read-only data scan for schema strings; see the header. It searches for
// the ") -> " every schema holds rather than walking every string, which
// keeps a 10 MB .rodata to a few milliseconds.
#include "userspace/discover/schema_strings.h"

#include <elf.h>
#include <string.h>

namespace torchprobe {
namespace {

bool IsKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == ':';
}

bool IsKeyStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

}  // namespace

SchemaStringIndex SchemaStringIndex::Build(const ElfImage& image) {
  SchemaStringIndex index;
  bool any_section = false;
  for (const ElfSection& section : image.sections()) {
    if (section.type != SHT_PROGBITS || !(section.flags & SHF_ALLOC) || (section.flags & SHF_EXECINSTR) ||
        (section.flags & SHF_WRITE))
      continue;
    any_section = true;
    index.AddStrings(image.SectionBytes(section));
  }
  if (!any_section) {
    // No section headers (rare, but legal): fall back to read-only segments.
    for (const LoadSegment& seg : image.segments())
      if (!(seg.flags & (PF_X | PF_W))) index.AddStrings(image.BytesAt(seg.vaddr, seg.file_size));
  }
  return index;
}

void SchemaStringIndex::AddStrings(std::string_view bytes) {
  constexpr std::string_view kArrow = ") -> ";
  const char* base = bytes.data();
  size_t pos = 0;
  while (pos < bytes.size()) {
    const void* hit = memmem(base + pos, bytes.size() - pos, kArrow.data(), kArrow.size());
    if (hit == nullptr) break;
    size_t at = static_cast<const char*>(hit) - base;
    const void* nul_before = memrchr(base + pos, '\0', at - pos);
    size_t begin = nul_before ? static_cast<const char*>(nul_before) - base + 1 : pos;
    const void* nul_after = memchr(base + at, '\0', bytes.size() - at);
    size_t end = nul_after ? static_cast<const char*>(nul_after) - base : bytes.size();
    pos = end + 1;
    std::string_view text = bytes.substr(begin, end - begin);
    size_t head = 0;
    while (head < text.size() && IsKeyChar(text[head])) ++head;
    if (head == 0 || head == text.size() || text[head] != '(') continue;
    ++string_count_;
    // Every tail of the key that could itself be an op key: it starts an
    // identifier, holds no namespace, and keeps the ".overload" if any.
    size_t dot = text.substr(0, head).find('.');
    size_t last_start = dot == std::string_view::npos ? head : dot;
    for (size_t p = 0; p < last_start; ++p) {
      if (!IsKeyStart(text[p])) continue;
      std::string_view key = text.substr(p, head - p);
      if (key.find(':') != std::string_view::npos) continue;
      by_key_[key].push_back({text.substr(p), text.substr(0, p)});
    }
  }
}

const std::vector<SchemaSighting>* SchemaStringIndex::Find(std::string_view key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &it->second;
}

}  // namespace torchprobe
