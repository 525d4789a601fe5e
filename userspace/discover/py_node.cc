// PyNode's Python object and name; see the header.
#include "userspace/discover/py_node.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "userspace/base/proc_maps.h"
#include "userspace/base/remote_memory.h"
#include "userspace/discover/autograd_probes.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/named_probes.h"

namespace torchprobe {
namespace {

constexpr std::string_view kPyNodeName = "_ZNK5torch8autograd6PyNode4nameB5cxx11Ev";
constexpr uint64_t kNameScan = 128;  // bytes of name() searched

// A `mov disp(%base),%dest` with a REX.W prefix at `code[at]`: its base and
// destination register numbers, displacement and length; nullopt otherwise.
struct Load {
  int base, dest;
  int64_t disp;
  size_t length;
};
std::optional<Load> LoadAt(std::string_view code, size_t at) {
  if (at + 4 > code.size()) return std::nullopt;
  uint8_t rex = code[at], op = code[at + 1], modrm = code[at + 2];
  if ((rex & 0xf8) != 0x48 || op != 0x8b) return std::nullopt;
  int mod = modrm >> 6, rm = modrm & 7;
  if (rm == 4 || mod == 0 || mod == 3) return std::nullopt;  // SIB, no or register operand
  Load load{((rex & 1) << 3) | rm, ((rex >> 2 & 1) << 3) | (modrm >> 3 & 7), 0, 0};
  if (mod == 1) {
    load.disp = static_cast<int8_t>(code[at + 3]);
    load.length = 4;
  } else {
    if (at + 7 > code.size()) return std::nullopt;
    int32_t disp;
    std::memcpy(&disp, code.data() + at + 3, 4);
    load.disp = disp;
    load.length = 7;
  }
  return load;
}

}  // namespace

std::optional<uint32_t> PyNodeObjectOffset(std::string_view code) {
  for (size_t i = 0; i < code.size(); ++i) {
    std::optional<Load> object = LoadAt(code, i);
    if (!object || object->disp <= 0 || object->disp >= 2048 || object->disp % 8) continue;
    std::optional<Load> type = LoadAt(code, i + object->length);
    if (!type || type->base != object->dest || type->disp != 8) continue;
    std::optional<Load> name = LoadAt(code, i + object->length + type->length);
    if (!name || name->base != type->dest || name->disp != static_cast<int64_t>(kTypeNameOffset)) continue;
    return static_cast<uint32_t>(object->disp);
  }
  return std::nullopt;
}

std::optional<uint32_t> FindPyNodeObjectOffset(const ElfImage& libtorch_python) {
  std::optional<uint32_t> offset;
  libtorch_python.ForEachSymbol([&](const ElfSymbol& s) {
    if (!offset && s.name == kPyNodeName && s.size > 0)
      offset = PyNodeObjectOffset(libtorch_python.BytesAt(s.vaddr, std::min<uint64_t>(s.size, kNameScan)));
  });
  return offset;
}

std::string LibtorchPythonBeside(const std::string& host_path) {
  // A library opened through the process' map_files (another mount
  // namespace) is found by the link's target: a path from our root when
  // the process' root is a folder of ours (chroot), else from its root.
  std::string libtorch_cpu_path = host_path;
  if (host_path.starts_with("/proc/") && host_path.find("/map_files/") != std::string::npos) {
    char target[4096];
    ssize_t n = readlink(host_path.c_str(), target, sizeof(target) - 1);
    if (n <= 0 || target[0] != '/') return "";
    std::string inside(target, n);
    std::string identity = ImageIdentity(host_path);
    for (const std::string& candidate :
         {inside, host_path.substr(0, host_path.find("/map_files/")) + "/root" + inside}) {
      if (identity.empty() || ImageIdentity(candidate) != identity) continue;  // another file there
      std::string found = LibtorchPythonBeside(candidate);
      if (!found.empty()) return found;
    }
    return "";
  }
  size_t slash = libtorch_cpu_path.rfind('/');
  std::string_view base = std::string_view(libtorch_cpu_path).substr(slash == std::string::npos ? 0 : slash + 1);
  constexpr std::string_view kCpu = "libtorch_cpu";
  if (!base.starts_with(kCpu)) return "";
  std::string path = libtorch_cpu_path.substr(0, libtorch_cpu_path.size() - base.size()) + "libtorch_python" +
                     std::string(base.substr(kCpu.size()));
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? path : "";
}

std::optional<std::string> ReadPythonTypeName(pid_t pid, uint64_t type) {
  uint64_t name = 0;
  if (!type || !ReadRemote(pid, type + kTypeNameOffset, &name, sizeof(name)) || !name) return std::nullopt;
  char buf[kMaxTypeName];
  // Page by page: a short name may end just before an unmapped page.
  size_t got = 0;
  while (got < sizeof(buf)) {
    size_t page_left = 4096 - ((name + got) & 4095);
    size_t want = std::min(sizeof(buf) - got, page_left);
    if (!ReadRemote(pid, name + got, buf + got, want)) break;
    if (std::memchr(buf + got, 0, want)) return std::string(buf);  // NUL inside: a whole name
    got += want;
  }
  return std::nullopt;  // unreadable, or longer than any class name we show
}

StatusOr<OpProbeSet> FindPyNodeProbes(const std::string& elf_path) {
  StatusOr<OpProbeSet> set = FindNamedProbes(elf_path, [](const ElfSymbol& symbol) -> std::optional<std::string> {
    std::optional<std::string> name = NodeApplyName(symbol.name);
    if (!name || *name != kPyNodeClass) return std::nullopt;
    return name;
  }, "pynode");
  if (set.ok())
    for (OpProbe& probe : set->probes) probe.op.category = kAutogradNode;
  return set;
}

}  // namespace torchprobe
