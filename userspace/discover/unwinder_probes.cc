// The unwinder's entry points in a process; see the header.
#include "userspace/discover/unwinder_probes.h"

#include "userspace/base/proc_maps.h"
#include "userspace/discover/elf_symbols.h"

namespace torchprobe {

StatusOr<UnwinderProbes> FindUnwinderProbes(uint32_t pid) {
  // GCC's unwinder; programs built with LLVM's libunwind are not covered.
  StatusOr<MappedImage> image = FindMappedImage(pid, "libgcc_s.so");
  if (!image.ok()) return Status::Error("it maps no libgcc_s (the C++ unwinder)");
  UnwinderProbes probes;
  probes.host_path = image->host_path;
  for (const char* name : kUnwinderEntryPoints) {
    StatusOr<uint64_t> offset = FindFunctionOffset(image->host_path, name);
    if (!offset.ok())
      return Status::Error(image->path + " has no " + name + ": an unwinder we do not know");
    probes.offsets.push_back(*offset);
  }
  return probes;
}

}  // namespace torchprobe
