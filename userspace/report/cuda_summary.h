// The report's CUDA table: how many CUDA runtime/driver and NCCL calls each
// op made, and their CPU time, from the call slices (named as the APIs name
// them) and the op each is nested in. Nothing when the trace has none.
#ifndef TORCHPROBE_REPORT_CUDA_SUMMARY_H
#define TORCHPROBE_REPORT_CUDA_SUMMARY_H

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

// A CUDA runtime ("cuda..."), driver ("cu" + capital) or NCCL ("nccl...") call.
bool IsCudaCallName(std::string_view name);

struct CudaCallRow {
  std::string op;    // the innermost enclosing slice that is no CUDA call; "" outside any
  std::string call;
  uint64_t calls = 0;
  uint64_t total_ns = 0;
};

// By op then call, most calls first.
std::vector<CudaCallRow> SummarizeCudaCalls(const DecodedTrace& trace);

// "CUDA calls by op" and its rows (at most `top`); nothing without rows.
void PrintCudaCalls(const std::vector<CudaCallRow>& rows, size_t top, std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_CUDA_SUMMARY_H
