// Address -> mapping -> file offset -> ELF vaddr -> function symbol; see the
// header.
#include "userspace/discover/address_symbols.h"

#include <cxxabi.h>
#include <elf.h>

#include <algorithm>
#include <cstdlib>

namespace torchprobe {

std::string DemangleSymbol(const std::string& mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  return name;
}

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

AddressSymbols::Image& AddressSymbols::OpenImage(uint32_t pid, const std::string& path) {
  auto it = images_.find(path);
  if (it != images_.end()) return it->second;
  Image& image = images_[path];
  // Through the process' root (containers); the path itself once it is gone.
  StatusOr<std::unique_ptr<ElfImage>> elf = ElfImage::Open("/proc/" + std::to_string(pid) + "/root" + path);
  if (!elf.ok()) elf = ElfImage::Open(path);
  if (!elf.ok()) return image;
  image.elf = std::move(*elf);
  image.functions = data_ ? image.elf->DataSymbols() : image.elf->FunctionSymbols();
  std::sort(image.functions.begin(), image.functions.end(),
            [](const ElfSymbol& a, const ElfSymbol& b) { return a.vaddr < b.vaddr; });
  return image;
}

std::string AddressSymbols::Name(uint32_t pid, uint64_t address) {
  auto known = names_.find({pid, address});
  if (known != names_.end()) return known->second;
  std::string& name = names_[{pid, address}];
  const MapEntry* mapping = FindMapping(pid, address);
  if (!mapping) return name;
  uint64_t file_offset = address - mapping->start + mapping->offset;
  std::string path = mapping->path;  // the entry may move when maps are re-read
  Image& image = OpenImage(pid, path);
  if (!image.elf) return name;
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
  return name;
}

}  // namespace torchprobe
