// An ELF image opened for reading symbols and constant data: the file is
// mmapped (libtorch is 100+ MB; nothing is copied) through MappedFile, which
// refuses what is not a regular file and survives the file being cut short
// while it is read (mapped_file.h); symbols come from .symtab and .dynsym,
// and virtual addresses become the file offsets that uprobes attach at.
#ifndef TORCHPROBE_DISCOVER_ELF_SYMBOLS_H
#define TORCHPROBE_DISCOVER_ELF_SYMBOLS_H

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

class MappedFile;

// A PT_LOAD program header: how a range of the file lands in memory.
struct LoadSegment {
  uint64_t vaddr = 0;
  uint64_t offset = 0;    // file offset of vaddr
  uint64_t file_size = 0; // bytes backed by the file (the rest is .bss)
  uint64_t mem_size = 0;
  uint32_t flags = 0;     // PF_R | PF_W | PF_X
};

// The file offset of `vaddr`, or nullopt when no segment backs it with file
// bytes. This is what a uprobe needs: the kernel places probes by file
// offset, which differs from the symbol's address once segments are
// aligned differently in memory and in the file.
std::optional<uint64_t> VaddrToFileOffset(const std::vector<LoadSegment>& segments, uint64_t vaddr);

struct ElfSymbol {
  std::string_view name;  // points into the mapped file: valid while the image lives
  uint64_t vaddr = 0;
  uint64_t size = 0;
  uint8_t type = 0;       // STT_FUNC, STT_OBJECT...
  uint8_t bind = 0;       // STB_GLOBAL, STB_LOCAL, STB_WEAK
  bool from_symtab = false;
};

struct ElfSection {
  std::string_view name;
  uint32_t type = 0;   // SHT_*
  uint64_t flags = 0;  // SHF_*
  uint64_t vaddr = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

class ElfImage {
 public:
  static StatusOr<std::unique_ptr<ElfImage>> Open(const std::string& path);
  ~ElfImage();
  ElfImage(const ElfImage&) = delete;
  ElfImage& operator=(const ElfImage&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<LoadSegment>& segments() const { return segments_; }
  const std::vector<ElfSection>& sections() const { return sections_; }
  bool has_symtab() const { return has_symtab_; }

  // Every defined symbol of .dynsym then .symtab; a symbol both tables hold
  // (same address and name) is visited once. Stripped builds have only
  // .dynsym; wheels keep .symtab too, with the hidden functions.
  void ForEachSymbol(const std::function<void(const ElfSymbol&)>& visit) const;
  // Defined STT_FUNC symbols with a size (what can be probed).
  std::vector<ElfSymbol> FunctionSymbols() const;
  // Defined STT_OBJECT symbols (constants, tables, static members).
  std::vector<ElfSymbol> DataSymbols() const;

  std::optional<uint64_t> FileOffset(uint64_t vaddr) const { return VaddrToFileOffset(segments_, vaddr); }
  // Up to `size` file-backed bytes at `vaddr`; shorter at a segment's end,
  // empty when unmapped.
  std::string_view BytesAt(uint64_t vaddr, uint64_t size) const;
  // The NUL-terminated string at `vaddr`; nullopt when unmapped or unterminated.
  std::optional<std::string_view> StringAt(uint64_t vaddr) const;
  // The pointer stored at `vaddr` as the dynamic loader leaves it: in a
  // shared library a `const char* const` holds 0 in the file and gets its
  // value from a RELATIVE relocation, so the relocation wins when present.
  std::optional<uint64_t> PointerAt(uint64_t vaddr) const;
  // The file bytes of a section (empty for SHT_NOBITS).
  std::string_view SectionBytes(const ElfSection& section) const;
  // Up to `size` bytes of the file at `offset`; shorter at its end.
  std::string_view FileBytes(uint64_t offset, uint64_t size) const;
  // The GNU build-id note's bytes, "" when there is none.
  std::string_view BuildId() const;
  // An error once the file was cut short while mapped: what was read from it
  // may be zeros (mapped_file.h). Planners check it before using a result.
  Status Intact() const;

 private:
  ElfImage() = default;
  Status Load();
  void LoadRelocations() const;

  std::string path_;
  std::unique_ptr<MappedFile> file_;
  const char* base_ = nullptr;  // file_'s bytes
  uint64_t size_ = 0;
  void* elf_ = nullptr;         // Elf*, kept opaque so callers need no libelf headers
  bool has_symtab_ = false;
  uint16_t machine_ = 0;
  std::vector<LoadSegment> segments_;
  std::vector<ElfSection> sections_;
  mutable bool relocations_loaded_ = false;
  mutable std::unordered_map<uint64_t, uint64_t> relative_;  // r_offset -> resolved value
};

// The file offset of the function `name` in the ELF at `path` (e.g. the
// dynamic loader's _dl_debug_state), for a single uprobe.
StatusOr<uint64_t> FindFunctionOffset(const std::string& path, std::string_view name);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_ELF_SYMBOLS_H
