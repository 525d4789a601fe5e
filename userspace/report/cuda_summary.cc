// CUDA calls counted per enclosing op; see the header.
#include "userspace/report/cuda_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "userspace/report/text_format.h"

namespace torchprobe {

bool IsCudaCallName(std::string_view name) {
  if (name.starts_with("cuda") || name.starts_with("nccl")) return true;
  return name.size() > 2 && name.starts_with("cu") && name[2] >= 'A' && name[2] <= 'Z';
}

std::vector<CudaCallRow> SummarizeCudaCalls(const DecodedTrace& trace) {
  std::map<std::pair<std::string, std::string>, CudaCallRow> rows;
  for (const DecodedThread& thread : trace.threads) {
    for (const DecodedSlice& slice : thread.slices) {
      const std::string& call = trace.ops[slice.op].name;
      if (!IsCudaCallName(call)) continue;
      int32_t parent = slice.parent;
      while (parent >= 0 && IsCudaCallName(trace.ops[thread.slices[parent].op].name))
        parent = thread.slices[parent].parent;
      std::string op = parent < 0 ? "" : trace.ops[thread.slices[parent].op].name;
      CudaCallRow& row = rows[{op, call}];
      row.op = op;
      row.call = call;
      ++row.calls;
      row.total_ns += slice.end_ns - slice.begin_ns;
    }
  }
  std::vector<CudaCallRow> sorted;
  for (auto& [key, row] : rows) sorted.push_back(std::move(row));
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const CudaCallRow& a, const CudaCallRow& b) { return a.calls > b.calls; });
  return sorted;
}

void PrintCudaCalls(const std::vector<CudaCallRow>& rows, size_t top, std::ostream& out) {
  if (rows.empty()) return;
  out << "\nCUDA calls by op (CPU side: the op open on the calling thread)\n";
  char line[256];
  std::snprintf(line, sizeof(line), "  %-32s %-28s %10s %12s\n", "op", "call", "# of Calls", "CPU total");
  out << line;
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const CudaCallRow& r = rows[i];
    std::snprintf(line, sizeof(line), "  %-32s %-28s %10llu %12s\n",
                  r.op.empty() ? "(outside any op)" : r.op.c_str(), r.call.c_str(),
                  static_cast<unsigned long long>(r.calls), FormatTime(r.total_ns).c_str());
    out << line;
  }
}

}  // namespace torchprobe
