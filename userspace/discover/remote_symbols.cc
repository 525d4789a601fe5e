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

}  // namespace torchprobe
