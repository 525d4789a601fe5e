// What `report` says of the memory categories (--memory --shapes; see
// model/memory_categories.h), per process and device: the bytes of each
// category at the peak of allocated memory, and how each grew per step
// (from the first step's begin to the last's: the first question of leak
// triage, which kind of memory grows).
#ifndef TORCHPROBE_REPORT_CATEGORY_SUMMARY_H
#define TORCHPROBE_REPORT_CATEGORY_SUMMARY_H

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

struct CategoryBytes {
  std::string category;  // "PARAMETER", ..., "unknown"
  int64_t bytes = 0;
};

// The bytes of each category of `pid` on `device` ("CPU", "cuda:0") at
// `ts_ns`: each category's last value at or before it; categories never
// seen are left out. PyTorch's order (INPUT ... OPTIMIZER_STATE, unknown last).
std::vector<CategoryBytes> CategoriesAt(const DecodedTrace& trace, uint32_t pid, const std::string& device,
                                        uint64_t ts_ns);

// The lines under a process' memory section; nothing when the trace has no
// categories for it. `device`: "" for CPU (memory_summary's), else "cuda:0".
void PrintMemoryCategories(const DecodedTrace& trace, uint32_t pid, const std::string& device, uint64_t peak_ns,
                           std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_CATEGORY_SUMMARY_H
