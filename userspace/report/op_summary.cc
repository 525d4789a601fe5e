#include "userspace/report/op_summary.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

namespace torchprobe {

std::vector<uint64_t> SelfTimes(const DecodedThread& thread) {
  const auto& slices = thread.slices;
  std::vector<uint64_t> self(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) self[i] = slices[i].end_ns - slices[i].begin_ns;
  for (const DecodedSlice& slice : slices) {
    if (slice.parent < 0) continue;
    uint64_t d = slice.end_ns - slice.begin_ns;
    self[slice.parent] = self[slice.parent] > d ? self[slice.parent] - d : 0;
  }
  return self;
}

std::vector<OpSummary> Summarize(const DecodedTrace& trace,
                                 const std::vector<const DecodedThread*>& threads, bool by_input_shape) {
  std::unordered_map<std::string, size_t> index;
  std::vector<OpSummary> rows;
  // Name of each op id, grouped by name as key_averages() groups by key.
  std::vector<size_t> row_of_op(trace.ops.size());
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    if (!trace.ops[i].category.empty()) {  // annotations: not ops
      row_of_op[i] = SIZE_MAX;
      continue;
    }
    auto [it, inserted] = index.emplace(trace.ops[i].name, rows.size());
    if (inserted) rows.push_back(OpSummary{trace.ops[i].name, ""});
    row_of_op[i] = it->second;
  }
  for (const DecodedThread* thread : threads) {
    const auto& slices = thread->slices;
    std::vector<uint64_t> self = SelfTimes(*thread);
    for (size_t i = 0; i < slices.size(); ++i) {
      if (row_of_op[slices[i].op] == SIZE_MAX) continue;
      size_t r = row_of_op[slices[i].op];
      if (by_input_shape && slices[i].input_dims >= 0) {  // the name's row for these shapes
        const std::string& shapes = trace.input_dims[static_cast<size_t>(slices[i].input_dims)];
        auto [it, inserted] = index.emplace(rows[r].name + '\0' + shapes, rows.size());
        if (inserted) rows.push_back(OpSummary{rows[r].name, shapes});
        r = it->second;
      }
      OpSummary& row = rows[r];
      ++row.calls;
      row.self_ns += self[i];
      row.total_ns += slices[i].end_ns - slices[i].begin_ns;
    }
  }
  rows.erase(
      std::remove_if(rows.begin(), rows.end(), [](const OpSummary& r) { return r.calls == 0; }),
      rows.end());
  std::sort(rows.begin(), rows.end(), [](const OpSummary& a, const OpSummary& b) {
    if (a.self_ns != b.self_ns) return a.self_ns > b.self_ns;
    return a.name != b.name ? a.name < b.name : a.input_shapes < b.input_shapes;
  });
  return rows;
}

std::vector<OpSummary> Summarize(const DecodedTrace& trace, bool by_input_shape) {
  std::vector<const DecodedThread*> threads;
  threads.reserve(trace.threads.size());
  for (const DecodedThread& thread : trace.threads) threads.push_back(&thread);
  return Summarize(trace, threads, by_input_shape);
}

}  // namespace torchprobe
