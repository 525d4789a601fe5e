// Exported functions' addresses in another process; see the header.
#include "userspace/discover/remote_symbols.h"

#include <elf.h>

#include <map>
#include <memory>
#include <optional>

#include "userspace/base/proc_maps.h"
#include "userspace/discover/elf_symbols.h"

namespace torchprobe {

StatusOr<std::vector<RemoteFunction>> FindRemoteFunctions(uint32_t pid, std::string_view library_prefix,
                                                          const std::vector<std::string_view>& functions) {
  StatusOr<MappedImage> image = FindMappedImage(pid, library_prefix);
  if (!image.ok()) return image.status();
  StatusOr<std::unique_ptr<ElfImage>> elf = ElfImage::Open(image->host_path);
  if (!elf.ok()) return elf.status();
  std::map<std::string_view, uint64_t> found;  // wanted name -> vaddr
  (*elf)->ForEachSymbol([&](const ElfSymbol& symbol) {
    if (symbol.type != STT_FUNC) return;  // an IFUNC's address is its resolver's
    for (std::string_view name : functions)
      if (symbol.name == name) found.try_emplace(name, symbol.vaddr);
  });
  std::vector<RemoteFunction> out;
  for (std::string_view name : functions) {
    auto it = found.find(name);
    if (it == found.end()) continue;
    std::optional<uint64_t> offset = (*elf)->FileOffset(it->second);
    std::optional<uint64_t> address = offset ? MappedAddress(*image, *offset) : std::nullopt;
    if (address) out.push_back(RemoteFunction{std::string(name), image->path, *address});
  }
  return out;
}

StatusOr<RemoteFunction> FindRemoteFunction(uint32_t pid, std::string_view library_prefix,
                                            std::string_view function) {
  StatusOr<std::vector<RemoteFunction>> found = FindRemoteFunctions(pid, library_prefix, {function});
  if (!found.ok()) return found.status();
  if (found->empty())
    return Status::Error(std::string(library_prefix) + " in process " + std::to_string(pid) + " has no " +
                         std::string(function));
  return found->front();
}

StatusOr<DynamicLoaderCalls> FindDynamicLoaderCalls(uint32_t pid) {
  // glibc 2.34+ has dlopen in libc; older ones in libdl, when loaded.
  StatusOr<RemoteFunction> dlopen_fn = FindRemoteFunction(pid, "libc.so.6", "dlopen");
  const char* dl = "libc.so.6";
  if (!dlopen_fn.ok()) {
    dl = "libdl.so.2";
    dlopen_fn = FindRemoteFunction(pid, dl, "dlopen");
    if (!dlopen_fn.ok()) {
      if (!IsProcessAlive(pid)) return Status::Error("no process with pid " + std::to_string(pid));
      return Status::Error("process " + std::to_string(pid) + " has no dlopen to call (glibc before 2.34 without libdl)");
    }
  }
  StatusOr<RemoteFunction> dlsym_fn = FindRemoteFunction(pid, dl, "dlsym");
  StatusOr<RemoteFunction> dlerror_fn = FindRemoteFunction(pid, dl, "dlerror");
  if (!dlsym_fn.ok()) return dlsym_fn.status();
  if (!dlerror_fn.ok()) return dlerror_fn.status();
  StatusOr<RemoteFunction> errno_fn = FindRemoteFunction(pid, "libc.so.6", "__errno_location");
  return DynamicLoaderCalls{dlopen_fn->address, dlsym_fn->address, dlerror_fn->address,
                            errno_fn.ok() ? errno_fn->address : 0};
}

}  // namespace torchprobe
