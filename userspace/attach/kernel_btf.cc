// The BTF walk; see the header. Layout: include/uapi/linux/btf.h.
#include "userspace/attach/kernel_btf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace torchprobe {
namespace {

struct BtfHeader {
  uint16_t magic;
  uint8_t version, flags;
  uint32_t hdr_len, type_off, type_len, str_off, str_len;
};
constexpr uint16_t kBtfMagic = 0xeB9F;
constexpr uint32_t kKindFunc = 12;

// Bytes that follow a type's 12-byte header, by kind (vlen: its member
// count); -1 for a kind newer than this table.
long TrailerBytes(uint32_t kind, uint32_t vlen) {
  switch (kind) {
    case 1: return 4;                   // INT
    case 3: return 12;                  // ARRAY
    case 4: case 5: return 12L * vlen;  // STRUCT, UNION
    case 6: return 8L * vlen;           // ENUM
    case 13: return 8L * vlen;          // FUNC_PROTO
    case 14: return 4;                  // VAR
    case 15: return 12L * vlen;         // DATASEC
    case 17: return 4;                  // DECL_TAG
    case 19: return 12L * vlen;         // ENUM64
    case 2: case 7: case 8: case 9: case 10: case 11: case 12: case 16: case 18:
      return 0;  // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
    default: return -1;
  }
}

// The file's bytes: mapped where the kernel allows it (6.16+ maps its BTF
// read-only), else read into one buffer of the file's size. Faults are dear
// here: reading into a growing string cost ~65 ms for 5.5 MB, mapping 2.5.
class BtfFile {
 public:
  explicit BtfFile(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
      void* mapped = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (mapped != MAP_FAILED) {
        mapped_ = mapped;
        bytes_ = std::string_view(static_cast<const char*>(mapped), static_cast<size_t>(st.st_size));
        close(fd);
        return;
      }
      copy_.reserve(static_cast<size_t>(st.st_size));
    }
    char buffer[1 << 16];
    for (;;) {
      ssize_t n = read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok_ = n == 0;
        break;
      }
      copy_.append(buffer, static_cast<size_t>(n));
    }
    close(fd);
    bytes_ = copy_;
  }
  ~BtfFile() {
    if (mapped_) munmap(mapped_, bytes_.size());
  }
  BtfFile(const BtfFile&) = delete;
  BtfFile& operator=(const BtfFile&) = delete;

  // Empty when it could not be read whole.
  std::string_view bytes() const { return mapped_ || ok_ ? bytes_ : std::string_view(); }

 private:
  void* mapped_ = nullptr;
  bool ok_ = false;
  std::string copy_;
  std::string_view bytes_;
};

}  // namespace

int KernelBtfHasFunc(std::string_view name, const std::string& path) {
  BtfFile file(path);
  std::string_view data = file.bytes();
  if (data.size() < sizeof(BtfHeader)) return -1;
  BtfHeader header;
  std::memcpy(&header, data.data(), sizeof header);
  if (header.magic != kBtfMagic || header.hdr_len > data.size()) return -1;
  uint64_t types = uint64_t{header.hdr_len} + header.type_off, types_end = types + header.type_len;
  uint64_t strings = uint64_t{header.hdr_len} + header.str_off, strings_end = strings + header.str_len;
  if (types_end > data.size() || strings_end > data.size()) return -1;
  auto name_at = [&](uint32_t offset) -> std::string_view {
    if (strings + offset >= strings_end) return {};
    const char* begin = data.data() + strings + offset;
    return std::string_view(begin, strnlen(begin, strings_end - strings - offset));
  };
  for (uint64_t at = types; at < types_end;) {
    if (at + 12 > types_end) return -1;
    uint32_t name_off, info;
    std::memcpy(&name_off, data.data() + at, 4);
    std::memcpy(&info, data.data() + at + 4, 4);
    uint32_t kind = (info >> 24) & 0x1f, vlen = info & 0xffff;
    if (kind == kKindFunc && name_at(name_off) == name) return 1;
    long trailer = TrailerBytes(kind, vlen);
    if (trailer < 0) return -1;
    at += 12 + static_cast<uint64_t>(trailer);
  }
  return 0;
}

}  // namespace torchprobe
