// Where c10 raises the errors that running out of memory makes (the oom
// probe set, bpf/oom.bpf.c): c10::ThrowEnforceNotMet (both overloads; a
// failed CAFFE_ENFORCE, alloc_cpu's among them) and
// c10::reportOutOfMemoryToProfiler (a device caching allocator's), in libc10.
#ifndef TORCHPROBE_DISCOVER_OOM_PROBES_H
#define TORCHPROBE_DISCOVER_OOM_PROBES_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

inline constexpr const char* kEnforcePrefix = "_ZN3c1018ThrowEnforceNotMet";
inline constexpr const char* kDeviceOomPrefix = "_ZN3c1027reportOutOfMemoryToProfiler";

struct OomProbes {
  std::vector<uint64_t> enforce_offsets;  // file offsets of each ThrowEnforceNotMet
  uint64_t device_offset = 0;             // ... of reportOutOfMemoryToProfiler; 0: none
};

// An error (one line) when `elf_path` (libc10) has none of them.
StatusOr<OomProbes> FindOomProbes(const std::string& elf_path);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_OOM_PROBES_H
