// Where the --memory probe set goes: libc10's CPU allocator, c10::alloc_cpu
// (entry and every `ret`) and c10::free_cpu (entry). Every CPU tensor's
// storage comes from alloc_cpu and goes back through free_cpu in PyTorch
// 1.x and 2.x, and both are exported by every libc10.
#ifndef TORCHPROBE_DISCOVER_ALLOCATOR_PROBES_H
#define TORCHPROBE_DISCOVER_ALLOCATOR_PROBES_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

// Mangled names: c10::alloc_cpu(size_t) and c10::free_cpu(void*).
inline constexpr const char* kAllocCpuSymbol = "_ZN3c109alloc_cpuEm";
inline constexpr const char* kFreeCpuSymbol = "_ZN3c108free_cpuEPv";
// c10::reportMemoryUsageToProfiler(void*, long, size_t|long, size_t|long,
// c10::Device): its last two parameters changed type (1.13 long, 2.x size_t).
inline constexpr const char* kDeviceReportPrefix = "_ZN3c1027reportMemoryUsageToProfilerEPvl";
// The image that holds them, as named in /proc/PID/maps.
inline constexpr const char* kAllocatorLibrary = "libc10.so";

struct AllocatorProbes {
  std::string image_path;               // host-openable path the offsets refer to
  uint64_t alloc_offset = 0;            // file offset of alloc_cpu
  std::vector<uint64_t> alloc_returns;  // ... of its `ret`s
  uint64_t free_offset = 0;             // file offset of free_cpu
  uint64_t device_report_offset = 0;    // ... of reportMemoryUsageToProfiler; 0: none
};

// An error (one line) when `elf_path` lacks either function or alloc_cpu has
// no `ret` to probe.
StatusOr<AllocatorProbes> FindAllocatorProbes(const std::string& elf_path);

// The CUDA runtime under the caching allocator: cudaMalloc (entry and
// `ret`s) and cudaFree, in the libcudart a process maps (wheels bundle one).
inline constexpr const char* kCudaRuntimeLibrary = "libcudart.so";
struct SegmentProbes {
  uint64_t malloc_offset = 0;
  std::vector<uint64_t> malloc_returns;
  uint64_t free_offset = 0;
};
StatusOr<SegmentProbes> FindSegmentProbes(const std::string& elf_path);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_ALLOCATOR_PROBES_H
