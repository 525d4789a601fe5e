// The autograd sequence number's TLS place, from libtorch's peek(); see the header.
#include "userspace/discover/sequence_number.h"

#include <algorithm>
#include <cstring>

#include "userspace/base/remote_memory.h"

namespace torchprobe {

namespace {

constexpr const char* kPeek = "_ZN2at15sequence_number4peekEv";
constexpr uint64_t kPeekScan = 64;
constexpr uint64_t kDtvUnallocated = ~uint64_t{0};  // glibc's TLS_DTV_UNALLOCATED

int32_t Int32At(std::string_view code, size_t at) {
  int32_t v;
  std::memcpy(&v, code.data() + at, 4);
  return v;
}

}  // namespace

std::optional<SequenceNumberTls> SequenceNumberTlsFromPeek(uint64_t peek_vaddr, std::string_view code) {
  SequenceNumberTls where;
  size_t after_lea = 0;
  for (size_t i = 0; i + 7 <= code.size() && !after_lea; ++i)
    if (code.compare(i, 3, "\x48\x8d\x3d") == 0) {  // lea disp32(%rip),%rdi
      after_lea = i + 7;
      where.tls_index_vaddr = peek_vaddr + after_lea + static_cast<int64_t>(Int32At(code, i + 3));
    }
  if (!after_lea) return std::nullopt;
  // The call to __tls_get_addr, then mov (%rax),%rax / mov disp8(%rax),%rax /
  // mov disp32(%rax),%rax.
  size_t call = code.find('\xe8', after_lea);
  if (call == std::string_view::npos) return std::nullopt;
  for (size_t i = call + 5; i + 3 <= code.size(); ++i) {
    if (code[i] != '\x48' || code[i + 1] != '\x8b') continue;
    if (code[i + 2] == '\x00') return where;
    if (code[i + 2] == '\x40' && i + 4 <= code.size()) {
      where.displacement = static_cast<int8_t>(code[i + 3]);
      return where;
    }
    if (code[i + 2] == '\x80' && i + 7 <= code.size()) {
      where.displacement = Int32At(code, i + 3);
      return where;
    }
  }
  return std::nullopt;
}

std::optional<SequenceNumberTls> FindSequenceNumberTls(const ElfImage& libtorch_cpu) {
  std::optional<SequenceNumberTls> where;
  libtorch_cpu.ForEachSymbol([&](const ElfSymbol& s) {
    if (!where && s.name == kPeek && s.size > 0)
      where = SequenceNumberTlsFromPeek(s.vaddr, libtorch_cpu.BytesAt(s.vaddr, std::min<uint64_t>(s.size, kPeekScan)));
  });
  return where;
}

std::optional<uint64_t> ReadSequenceNumber(pid_t pid, uint64_t fs_base, uint64_t tls_index,
                                           const SequenceNumberTls& where) {
  uint64_t index[2];  // tls_index: module id, offset in its block
  uint64_t dtv = 0, block = 0, value = 0;
  if (!ReadRemote(pid, tls_index, index, sizeof(index)) || !ReadRemote(pid, fs_base + 8, &dtv, 8) ||
      index[0] == 0 || index[0] > 1 << 16 || !ReadRemote(pid, dtv + 16 * index[0], &block, 8))
    return std::nullopt;
  if (block == kDtvUnallocated) return 0;
  if (!ReadRemote(pid, block + index[1] + static_cast<uint64_t>(where.displacement), &value, 8)) return std::nullopt;
  return value;
}

std::optional<SequenceNumberPlace> FindSequenceNumberPlace(pid_t pid, const MappedImage& libtorch,
                                                           const ElfImage& image, const SequenceNumberTls& where) {
  std::optional<uint64_t> offset = image.FileOffset(where.tls_index_vaddr);
  std::optional<uint64_t> address = offset ? MappedAddress(libtorch, *offset) : std::nullopt;
  uint64_t index[2];  // tls_index: module id, offset in its block
  if (!address || !ReadRemote(pid, *address, index, sizeof(index)) || index[0] == 0) return std::nullopt;
  return SequenceNumberPlace{index[0], index[1] + static_cast<uint64_t>(where.displacement)};
}

}  // namespace torchprobe
