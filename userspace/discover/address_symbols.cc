// Address -> mapping -> file offset -> ELF vaddr -> function symbol; see the
// header.
#include "userspace/discover/address_symbols.h"

#include <elf.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "userspace/base/clock.h"
#include "userspace/base/demangle.h"

namespace torchprobe {

void AddressSymbols::Remember(uint32_t pid) {
  StatusOr<std::vector<MapEntry>> maps = ReadMaps(pid);
  if (maps.ok()) maps_[pid] = std::move(*maps);
}

const MapEntry* AddressSymbols::FindMapping(uint32_t pid, uint64_t address) {
  auto find = [&]() -> const MapEntry* {
    for (const MapEntry& m : maps_[pid])
      if (address >= m.start && address < m.end && !m.path.empty() && m.path[0] == '/') return &m;
    return nullptr;
  };
  if (const MapEntry* m = find()) return m;
  Remember(pid);  // first time, or a library loaded since
  return find();
}

void AddressSymbols::Failed(uint32_t pid, uint64_t address, const std::string& why) {
  if (!first_failure_.empty()) return;
  char where[64];
  std::snprintf(where, sizeof(where), "%#lx", static_cast<unsigned long>(address));
  first_failure_ = "process " + std::to_string(pid) + ", address " + where + ": " + why;
}

AddressSymbols::Image& AddressSymbols::OpenImage(uint32_t pid, const MapEntry& mapping) {
  // An image that could not be read is tried again, a second later at most
  // once: a passing failure (descriptors or memory short under load) must
  // not leave every later name of the run missing.
  constexpr uint64_t kRetryNs = 1'000'000'000;
  auto it = images_.find({mapping.dev, mapping.inode});
  if (it != images_.end() && (it->second.elf || NowNs() - it->second.failed_ns < kRetryNs)) return it->second;
  Image& image = images_[{mapping.dev, mapping.inode}];
  // Through the process' root (containers), else its mapping, else this
  // root's same path; each only where it is the file mapped: once the
  // process is gone, a container's /usr/lib/x.so on the host is another
  // library, and its names would be wrong ones.
  char range[64];
  std::snprintf(range, sizeof(range), "%lx-%lx", static_cast<unsigned long>(mapping.start),
                static_cast<unsigned long>(mapping.end));
  std::string proc = "/proc/" + std::to_string(pid);
  for (const std::string& candidate : {proc + "/root" + mapping.path, proc + "/map_files/" + range, mapping.path}) {
    if (!IsMappedFile(candidate, mapping)) continue;
    StatusOr<std::unique_ptr<ElfImage>> elf = ElfImage::Open(candidate);
    if (!elf.ok()) continue;
    image.elf = std::move(*elf);
    image.functions = data_ ? image.elf->DataSymbols() : image.elf->FunctionSymbols();
    std::sort(image.functions.begin(), image.functions.end(),
              [](const ElfSymbol& a, const ElfSymbol& b) { return a.vaddr < b.vaddr; });
    break;
  }
  if (!image.elf) image.failed_ns = NowNs();
  return image;
}

std::string AddressSymbols::Name(uint32_t pid, uint64_t address) {
  auto known = names_.find({pid, address});
  if (known != names_.end()) return known->second;
  const MapEntry* mapping = FindMapping(pid, address);
  if (!mapping) {
    Failed(pid, address, "in no file the process maps");
    return names_[{pid, address}];
  }
  MapEntry where = *mapping;  // the entry may move when maps are re-read
  uint64_t file_offset = address - where.start + where.offset;
  Image& image = OpenImage(pid, where);
  if (!image.elf) {  // not remembered: asked again, the image is tried again
    Failed(pid, address, "cannot read " + where.path + " as the process maps it");
    return {};
  }
  std::string& name = names_[{pid, address}];
  for (const LoadSegment& segment : image.elf->segments()) {
    if (file_offset < segment.offset || file_offset >= segment.offset + segment.file_size) continue;
    uint64_t vaddr = segment.vaddr + (file_offset - segment.offset);
    auto after = std::upper_bound(image.functions.begin(), image.functions.end(), vaddr,
                                  [](uint64_t v, const ElfSymbol& s) { return v < s.vaddr; });
    if (after == image.functions.begin()) break;
    const ElfSymbol& symbol = *std::prev(after);
    if (vaddr < symbol.vaddr + symbol.size) name = DemangleSymbol(std::string(symbol.name));
    break;
  }
  if (name.empty()) Failed(pid, address, "no symbol there in " + where.path);
  return name;
}

}  // namespace torchprobe
