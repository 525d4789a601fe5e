// Finds libc10's CPU allocator functions; see the header.
#include "userspace/discover/allocator_probes.h"

#include <elf.h>

#include <memory>
#include <optional>

#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/function_returns.h"
#include "userspace/discover/return_sites.h"

namespace torchprobe {

StatusOr<AllocatorProbes> FindAllocatorProbes(const std::string& elf_path) {
  StatusOr<std::unique_ptr<ElfImage>> opened = ElfImage::Open(elf_path);
  if (!opened.ok()) return opened.status();
  const ElfImage& image = **opened;
  std::optional<ElfSymbol> alloc, free, report;
  image.ForEachSymbol([&](const ElfSymbol& symbol) {
    if (symbol.type != STT_FUNC || symbol.size == 0) return;
    if (symbol.name == kAllocCpuSymbol) alloc = symbol;
    if (symbol.name == kFreeCpuSymbol) free = symbol;
    if (symbol.name.starts_with(kDeviceReportPrefix)) report = symbol;
  });
  if (!alloc || !free)
    return Status::Error(elf_path + " has no c10::" + (alloc ? "free_cpu" : "alloc_cpu") +
                         ": CPU memory cannot be traced");
  StatusOr<std::unique_ptr<ReturnSiteFinder>> finder = ReturnSiteFinder::Create();
  if (!finder.ok()) return finder.status();
  AllocatorProbes probes;
  probes.image_path = elf_path;
  std::optional<uint64_t> alloc_offset = image.FileOffset(alloc->vaddr);
  std::optional<uint64_t> free_offset = image.FileOffset(free->vaddr);
  if (!alloc_offset || !free_offset)
    return Status::Error(elf_path + ": c10's allocator functions are not backed by the file");
  probes.alloc_offset = *alloc_offset;
  probes.free_offset = *free_offset;
  if (report) probes.device_report_offset = image.FileOffset(report->vaddr).value_or(0);
  probes.alloc_returns = FindFunctionReturns(image, **finder, *alloc).offsets;
  if (probes.alloc_returns.empty())
    return Status::Error(elf_path + ": no `ret` found in c10::alloc_cpu: CPU memory cannot be traced");
  return probes;
}

StatusOr<SegmentProbes> FindSegmentProbes(const std::string& elf_path) {
  StatusOr<std::unique_ptr<ElfImage>> opened = ElfImage::Open(elf_path);
  if (!opened.ok()) return opened.status();
  const ElfImage& image = **opened;
  std::optional<ElfSymbol> malloc, free;
  image.ForEachSymbol([&](const ElfSymbol& symbol) {
    if (symbol.type != STT_FUNC || symbol.size == 0) return;
    if (symbol.name == "cudaMalloc") malloc = symbol;
    if (symbol.name == "cudaFree") free = symbol;
  });
  if (!malloc || !free) return Status::Error(elf_path + " has no cudaMalloc and cudaFree");
  StatusOr<std::unique_ptr<ReturnSiteFinder>> finder = ReturnSiteFinder::Create();
  if (!finder.ok()) return finder.status();
  SegmentProbes probes;
  probes.malloc_offset = image.FileOffset(malloc->vaddr).value_or(0);
  probes.free_offset = image.FileOffset(free->vaddr).value_or(0);
  probes.malloc_returns = FindFunctionReturns(image, **finder, *malloc).offsets;
  if (!probes.malloc_offset || !probes.free_offset || probes.malloc_returns.empty())
    return Status::Error(elf_path + ": cudaMalloc or cudaFree cannot be probed");
  return probes;
}

}  // namespace torchprobe
