// ELF reading with libelf over our own mapping (mapped_file.h); see the header.
#include "userspace/discover/elf_symbols.h"

#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "userspace/discover/mapped_file.h"

namespace torchprobe {
namespace {

Elf* AsElf(void* elf) { return static_cast<Elf*>(elf); }

struct SymbolKey {
  uint64_t vaddr;
  std::string_view name;
  bool operator==(const SymbolKey&) const = default;
};
struct SymbolKeyHash {
  size_t operator()(const SymbolKey& k) const {
    return std::hash<std::string_view>()(k.name) ^ (k.vaddr * 0x9e3779b97f4a7c15ull);
  }
};

// Relocation types whose result is base + addend (base is 0 in the file).
bool IsRelativeReloc(uint16_t machine, uint32_t type) {
  return (machine == EM_X86_64 && type == 8 /* R_X86_64_RELATIVE */) ||
         (machine == EM_AARCH64 && type == 1027 /* R_AARCH64_RELATIVE */);
}
// Relocation types whose result is symbol + addend (or the symbol alone).
bool IsAbsoluteReloc(uint16_t machine, uint32_t type) {
  return (machine == EM_X86_64 && (type == 1 /* R_X86_64_64 */ || type == 6 /* GLOB_DAT */)) ||
         (machine == EM_AARCH64 && (type == 257 /* ABS64 */ || type == 1025 /* GLOB_DAT */));
}

}  // namespace

std::optional<uint64_t> VaddrToFileOffset(const std::vector<LoadSegment>& segments, uint64_t vaddr) {
  for (const LoadSegment& seg : segments) {
    if (vaddr >= seg.vaddr && vaddr - seg.vaddr < seg.file_size) return vaddr - seg.vaddr + seg.offset;
  }
  return std::nullopt;
}

StatusOr<std::unique_ptr<ElfImage>> ElfImage::Open(const std::string& path) {
  std::unique_ptr<ElfImage> image(new ElfImage());
  image->path_ = path;
  Status status = image->Load();
  if (!status.ok()) return status;
  return image;
}

ElfImage::~ElfImage() {
  if (elf_ != nullptr) elf_end(AsElf(elf_));
}

Status ElfImage::Intact() const {
  if (file_ && file_->cut_short()) return Status::Error(path_ + " was cut short while it was read: not used");
  return Status::Ok();
}

Status ElfImage::Load() {
  if (elf_version(EV_CURRENT) == EV_NONE) return Status::Error("libelf: " + std::string(elf_errmsg(-1)));
  StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path_);
  if (!file.ok()) return file.status();
  file_ = std::move(*file);
  base_ = file_->data();
  size_ = file_->size();
  char* map = file_->data();
  Elf* elf = elf_memory(map, size_);
  elf_ = elf;
  if (elf == nullptr || elf_kind(elf) != ELF_K_ELF) return Status::Error(path_ + " is not an ELF file");
  GElf_Ehdr ehdr;
  if (gelf_getehdr(elf, &ehdr) == nullptr) return Status::Error(path_ + ": bad ELF header");
  machine_ = ehdr.e_machine;

  size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) != 0) return Status::Error(path_ + ": bad program headers");
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr || phdr.p_type != PT_LOAD) continue;
    LoadSegment seg;
    seg.vaddr = phdr.p_vaddr;
    seg.offset = phdr.p_offset;
    seg.file_size = phdr.p_offset <= size_ ? std::min<uint64_t>(phdr.p_filesz, size_ - phdr.p_offset) : 0;
    seg.mem_size = phdr.p_memsz;
    seg.flags = phdr.p_flags;
    segments_.push_back(seg);
  }
  if (segments_.empty()) return Status::Error(path_ + " has no loadable segments");

  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) shstrndx = 0;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr) continue;
    ElfSection section;
    const char* name = shstrndx ? elf_strptr(elf, shstrndx, shdr.sh_name) : nullptr;
    section.name = name ? name : "";
    section.type = shdr.sh_type;
    section.flags = shdr.sh_flags;
    section.vaddr = shdr.sh_addr;
    section.offset = shdr.sh_offset;
    section.size = shdr.sh_size;
    if (shdr.sh_type == SHT_SYMTAB) has_symtab_ = true;
    sections_.push_back(section);
  }
  return Status::Ok();
}

void ElfImage::ForEachSymbol(const std::function<void(const ElfSymbol&)>& visit) const {
  Elf* elf = AsElf(elf_);
  // .dynsym first: it is small, so the set that dedupes .symtab against it
  // stays small too (a wheel's .symtab can hold a million entries).
  std::unordered_set<SymbolKey, SymbolKeyHash> dynamic;
  for (uint32_t wanted : {static_cast<uint32_t>(SHT_DYNSYM), static_cast<uint32_t>(SHT_SYMTAB)}) {
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != wanted || shdr.sh_entsize == 0) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr) continue;
      size_t count = shdr.sh_size / shdr.sh_entsize;
      for (size_t i = 1; i < count; ++i) {
        GElf_Sym sym;
        if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
        if (sym.st_shndx == SHN_UNDEF || sym.st_name == 0) continue;
        const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
        if (name == nullptr || *name == '\0') continue;
        ElfSymbol symbol;
        symbol.name = name;
        symbol.vaddr = sym.st_value;
        symbol.size = sym.st_size;
        symbol.type = static_cast<uint8_t>(GELF_ST_TYPE(sym.st_info));
        symbol.bind = static_cast<uint8_t>(GELF_ST_BIND(sym.st_info));
        symbol.from_symtab = wanted == SHT_SYMTAB;
        SymbolKey key{symbol.vaddr, symbol.name};
        if (wanted == SHT_DYNSYM) {
          if (!dynamic.insert(key).second) continue;
        } else if (dynamic.count(key)) {
          continue;
        }
        visit(symbol);
      }
    }
  }
}

std::vector<ElfSymbol> ElfImage::FunctionSymbols() const {
  std::vector<ElfSymbol> out;
  ForEachSymbol([&](const ElfSymbol& s) {
    if ((s.type == STT_FUNC || s.type == STT_GNU_IFUNC) && s.size > 0) out.push_back(s);
  });
  return out;
}

std::vector<ElfSymbol> ElfImage::DataSymbols() const {
  std::vector<ElfSymbol> out;
  ForEachSymbol([&](const ElfSymbol& s) {
    if (s.type == STT_OBJECT) out.push_back(s);
  });
  return out;
}

std::string_view ElfImage::BytesAt(uint64_t vaddr, uint64_t size) const {
  for (const LoadSegment& seg : segments_) {
    if (vaddr < seg.vaddr || vaddr - seg.vaddr >= seg.file_size) continue;
    uint64_t skip = vaddr - seg.vaddr;
    uint64_t available = seg.file_size - skip;
    return std::string_view(base_ + seg.offset + skip, std::min(size, available));
  }
  return {};
}

std::optional<std::string_view> ElfImage::StringAt(uint64_t vaddr) const {
  std::string_view bytes = BytesAt(vaddr, UINT64_MAX);
  size_t end = bytes.find('\0');
  if (bytes.empty() || end == std::string_view::npos) return std::nullopt;
  return bytes.substr(0, end);
}

void ElfImage::LoadRelocations() const {
  relocations_loaded_ = true;
  Elf* elf = AsElf(elf_);
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_RELA || !(shdr.sh_flags & SHF_ALLOC) ||
        shdr.sh_entsize == 0)
      continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr) continue;
    Elf_Scn* symscn = elf_getscn(elf, shdr.sh_link);
    Elf_Data* symdata = symscn ? elf_getdata(symscn, nullptr) : nullptr;
    size_t count = shdr.sh_size / shdr.sh_entsize;
    for (size_t i = 0; i < count; ++i) {
      GElf_Rela rela;
      if (gelf_getrela(data, static_cast<int>(i), &rela) == nullptr) continue;
      uint32_t type = static_cast<uint32_t>(GELF_R_TYPE(rela.r_info));
      if (IsRelativeReloc(machine_, type)) {
        relative_[rela.r_offset] = static_cast<uint64_t>(rela.r_addend);
      } else if (IsAbsoluteReloc(machine_, type) && symdata != nullptr) {
        GElf_Sym sym;
        if (gelf_getsym(symdata, static_cast<int>(GELF_R_SYM(rela.r_info)), &sym) == nullptr ||
            sym.st_shndx == SHN_UNDEF)
          continue;  // bound at run time to another library: unknown here
        relative_[rela.r_offset] = sym.st_value + static_cast<uint64_t>(rela.r_addend);
      }
    }
  }
}

std::optional<uint64_t> ElfImage::PointerAt(uint64_t vaddr) const {
  if (!relocations_loaded_) LoadRelocations();
  auto it = relative_.find(vaddr);
  if (it != relative_.end()) return it->second;
  // No RELA entry: a non-PIC image, or RELR packing, whose addend is the
  // value the file already holds.
  std::string_view bytes = BytesAt(vaddr, sizeof(uint64_t));
  if (bytes.size() != sizeof(uint64_t)) return std::nullopt;
  uint64_t value;
  std::memcpy(&value, bytes.data(), sizeof(value));
  return value;
}

std::string_view ElfImage::SectionBytes(const ElfSection& section) const {
  if (section.type == SHT_NOBITS || section.offset >= size_) return {};
  return std::string_view(base_ + section.offset, std::min(section.size, size_ - section.offset));
}

std::string_view ElfImage::FileBytes(uint64_t offset, uint64_t size) const {
  if (offset >= size_) return {};
  return std::string_view(base_ + offset, std::min(size, size_ - offset));
}

std::string_view ElfImage::BuildId() const {
  for (const ElfSection& section : sections_) {
    if (section.type != SHT_NOTE) continue;
    std::string_view notes = SectionBytes(section);
    // Elf64_Nhdr and Elf32_Nhdr are alike: namesz, descsz, type; name and
    // description each padded to 4 bytes.
    auto padded = [](uint64_t n) { return (n + 3) & ~uint64_t{3}; };
    for (uint64_t at = 0; notes.size() - at >= sizeof(Elf64_Nhdr);) {
      Elf64_Nhdr header;
      std::memcpy(&header, notes.data() + at, sizeof header);
      uint64_t name = at + sizeof header, desc = name + padded(header.n_namesz);
      if (desc > notes.size() || notes.size() - desc < header.n_descsz) break;
      if (header.n_type == NT_GNU_BUILD_ID && header.n_namesz == 4 && notes.substr(name, 4) == std::string_view("GNU\0", 4))
        return notes.substr(desc, header.n_descsz);
      at = desc + padded(header.n_descsz);
    }
  }
  return {};
}

StatusOr<uint64_t> FindFunctionOffset(const std::string& path, std::string_view name) {
  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(path);
  if (!image.ok()) return image.status();
  std::optional<uint64_t> offset;
  (*image)->ForEachSymbol([&](const ElfSymbol& s) {
    if (!offset && s.type == STT_FUNC && s.name == name) offset = (*image)->FileOffset(s.vaddr);
  });
  if (!offset) return Status::Error(path + " has no function " + std::string(name));
  return *offset;
}

}  // namespace torchprobe
