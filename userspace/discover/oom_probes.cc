// Finds c10's out-of-memory raising points; see the header.
#include "userspace/discover/oom_probes.h"

#include <elf.h>

#include <memory>

#include "userspace/discover/elf_symbols.h"

namespace torchprobe {

StatusOr<OomProbes> FindOomProbes(const std::string& elf_path) {
  StatusOr<std::unique_ptr<ElfImage>> opened = ElfImage::Open(elf_path);
  if (!opened.ok()) return opened.status();
  const ElfImage& image = **opened;
  OomProbes probes;
  image.ForEachSymbol([&](const ElfSymbol& symbol) {
    if (symbol.type != STT_FUNC || symbol.size == 0) return;
    std::optional<uint64_t> offset;
    if (symbol.name.starts_with(kEnforcePrefix) || symbol.name.starts_with(kDeviceOomPrefix))
      offset = image.FileOffset(symbol.vaddr);
    if (!offset) return;
    if (symbol.name.starts_with(kEnforcePrefix)) probes.enforce_offsets.push_back(*offset);
    else probes.device_offset = *offset;
  });
  if (probes.enforce_offsets.empty() && !probes.device_offset)
    return Status::Error(elf_path + " has neither c10::ThrowEnforceNotMet nor c10::reportOutOfMemoryToProfiler: "
                         "out-of-memory errors cannot be seen");
  return probes;
}

}  // namespace torchprobe
