// The entry probe's place; see the header.
#include "userspace/discover/probe_entry.h"

#include "userspace/discover/elf_symbols.h"

namespace torchprobe {

uint64_t EntrySkip(std::string_view code) {
  constexpr std::string_view kEndbr64 = "\xF3\x0F\x1E\xFA";
  if (code.substr(0, kEndbr64.size()) != kEndbr64) return 0;
  std::string_view next = code.substr(kEndbr64.size());
  auto is_push = [](uint8_t op) { return op >= 0x50 && op <= 0x57; };  // push r64
  if (!next.empty() && is_push(static_cast<uint8_t>(next[0]))) return kEndbr64.size();
  if (next.size() >= 2 && static_cast<uint8_t>(next[0]) == 0x41 && is_push(static_cast<uint8_t>(next[1])))
    return kEndbr64.size();  // push r8..r15
  return 0;
}

std::optional<uint64_t> EntryProbeOffset(const ElfImage& image, uint64_t vaddr) {
  std::optional<uint64_t> offset = image.FileOffset(vaddr);
  if (!offset) return std::nullopt;
  return *offset + EntrySkip(image.BytesAt(vaddr, 6));
}

}  // namespace torchprobe
