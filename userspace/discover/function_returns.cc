// `ret`s of a function, following one tail call; see the header.
#include "userspace/discover/function_returns.h"

#include <cstring>
#include <string_view>

#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/return_sites.h"

namespace torchprobe {
namespace {

constexpr uint8_t kPcrelSdata4 = 0x1b;   // DW_EH_PE_pcrel | DW_EH_PE_sdata4
constexpr uint8_t kDatarelSdata4 = 0x3b; // DW_EH_PE_datarel | DW_EH_PE_sdata4
constexpr uint8_t kUdata4 = 0x03;

int32_t ReadS32(std::string_view bytes, size_t at) {
  int32_t v;
  std::memcpy(&v, bytes.data() + at, sizeof(v));
  return v;
}

uint32_t ReadU32(std::string_view bytes, size_t at) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + at, sizeof(v));
  return v;
}

}  // namespace

std::optional<std::pair<uint64_t, uint64_t>> FunctionBounds(const ElfImage& image, uint64_t vaddr) {
  const ElfSection* hdr = nullptr;
  for (const ElfSection& s : image.sections())
    if (s.name == ".eh_frame_hdr") hdr = &s;
  if (!hdr) return std::nullopt;
  std::string_view bytes = image.BytesAt(hdr->vaddr, hdr->size);
  if (bytes.size() < 12 || bytes[0] != 1 || static_cast<uint8_t>(bytes[1]) != kPcrelSdata4 ||
      static_cast<uint8_t>(bytes[2]) != kUdata4 || static_cast<uint8_t>(bytes[3]) != kDatarelSdata4)
    return std::nullopt;
  uint32_t count = ReadU32(bytes, 8);
  if (12 + uint64_t{count} * 8 > bytes.size() || count == 0) return std::nullopt;
  // The table is sorted by initial location: the last entry at or before vaddr.
  auto location = [&](uint32_t i) { return hdr->vaddr + ReadS32(bytes, 12 + i * 8); };
  uint32_t lo = 0, hi = count;
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    (location(mid) <= vaddr ? lo : hi) = mid;
  }
  uint64_t begin = location(lo);
  if (begin > vaddr) return std::nullopt;
  uint64_t fde = hdr->vaddr + ReadS32(bytes, 12 + lo * 8 + 4);
  std::string_view entry = image.BytesAt(fde, 16);
  if (entry.size() < 16 || ReadU32(entry, 0) == 0xffffffffu) return std::nullopt;
  // pc_begin (pcrel sdata4, the usual CIE 'R' encoding) then pc_range.
  uint64_t pc_begin = fde + 8 + ReadS32(entry, 8);
  uint64_t range = ReadU32(entry, 12);
  if (pc_begin != begin || vaddr >= begin + range) return std::nullopt;  // not the encoding we assumed
  return std::make_pair(begin, begin + range);
}

FunctionReturns FindFunctionReturns(const ElfImage& image, const ReturnSiteFinder& finder,
                                    const ElfSymbol& symbol) {
  FunctionReturns result;
  std::string_view code = image.BytesAt(symbol.vaddr, symbol.size);
  std::vector<uint64_t> sites = finder.Find(code, symbol.vaddr);
  if (sites.empty()) {
    std::optional<uint64_t> target = finder.TailCallTarget(code, symbol.vaddr);
    std::optional<std::pair<uint64_t, uint64_t>> bounds =
        target ? FunctionBounds(image, *target) : std::nullopt;
    if (bounds && bounds->first == *target) {
      sites = finder.Find(image.BytesAt(bounds->first, bounds->second - bounds->first), bounds->first);
      result.via_tail_call = !sites.empty();
    }
  }
  for (uint64_t site : sites)
    if (std::optional<uint64_t> at = image.FileOffset(site)) result.offsets.push_back(*at);
  return result;
}

}  // namespace torchprobe
