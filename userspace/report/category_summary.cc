// Memory categories at the peak and per step; see the header.
#include "userspace/report/category_summary.h"

#include <algorithm>
#include <map>

#include "userspace/report/text_format.h"

namespace torchprobe {
namespace {

constexpr const char* kOrder[] = {"PARAMETER", "OPTIMIZER_STATE", "GRADIENT", "INPUT", "ACTIVATION",
                                  "TEMPORARY", "AUTOGRAD_DETAIL", "unknown"};

// A category's bytes, or with `sign` a growth ("+1.0 KiB").
std::string Bytes(int64_t bytes, bool sign) {
  std::string s = bytes < 0 ? "-" : sign ? "+" : "";
  return s + FormatBytes(static_cast<uint64_t>(bytes < 0 ? -bytes : bytes));
}

}  // namespace

std::vector<CategoryBytes> CategoriesAt(const DecodedTrace& trace, uint32_t pid, const std::string& device,
                                        uint64_t ts_ns) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> last;  // category -> (ts, bytes) of its last value
  for (const DecodedCategoryBytes& b : trace.memory_categories) {
    if (b.pid != pid || b.device != device) continue;
    auto [it, first] = last.try_emplace(b.category, 0, 0);
    if (b.ts_ns <= ts_ns && (first || b.ts_ns >= it->second.first)) it->second = {b.ts_ns, b.bytes};
  }
  std::vector<CategoryBytes> out;
  for (const char* name : kOrder)
    if (auto it = last.find(name); it != last.end()) out.push_back({name, static_cast<int64_t>(it->second.second)});
  return out;
}

void PrintMemoryCategories(const DecodedTrace& trace, uint32_t pid, const std::string& device, uint64_t peak_ns,
                           std::ostream& out) {
  std::string where = device.empty() ? "CPU" : device;
  if (std::none_of(trace.memory_categories.begin(), trace.memory_categories.end(),
                   [&](const DecodedCategoryBytes& b) { return b.pid == pid && b.device == where; }))
    return;
  std::string line;
  for (const CategoryBytes& c : CategoriesAt(trace, pid, where, peak_ns))
    if (c.bytes) line += (line.empty() ? "" : ", ") + c.category + " " + Bytes(c.bytes, false);
  out << "    at the peak, by category: " << (line.empty() ? "nothing categorized" : line) << "\n";
  // Per step: the main thread's steps (ProfilerStep# slices of this process), first begin to last begin.
  std::vector<uint64_t> begins;
  for (const DecodedThread& t : trace.threads) {
    if (t.pid != pid) continue;
    for (const DecodedSlice& s : t.slices)
      if (trace.ops[s.op].name.starts_with("ProfilerStep#")) begins.push_back(s.begin_ns);
  }
  std::sort(begins.begin(), begins.end());
  if (begins.size() < 3) return;
  // From the second step on: the first holds what is made once (optimizer state, lazy modules).
  std::vector<CategoryBytes> from = CategoriesAt(trace, pid, where, begins[1]);
  std::vector<CategoryBytes> to = CategoriesAt(trace, pid, where, begins.back());
  double steps = static_cast<double>(begins.size() - 2);
  line.clear();
  for (const CategoryBytes& c : to) {
    int64_t before = 0;
    for (const CategoryBytes& f : from)
      if (f.category == c.category) before = f.bytes;
    int64_t growth = static_cast<int64_t>(static_cast<double>(c.bytes - before) / steps);
    if (growth) line += (line.empty() ? "" : ", ") + c.category + " " + Bytes(growth, true);
  }
  out << "    growth per step over " << begins.size() - 2 << " steps, by category: "
      << (line.empty() ? "none" : line) << "\n";
}

}  // namespace torchprobe
