// torch.compile in a trace (PyTorch 2.x): the `Torch-Compiled Region: G/F`
// ranges dynamo opens around each call of compiled code, its `TorchDynamo
// Cache Lookup`s and `(dynamo_timed)` compile phases, and the figures
// torch._dynamo's ProfileMetrics reports from a profile: outermost ops (and
// their time) inside compiled regions against all, the compiled graphs seen
// (distinct regions), and graph breaks as regions per step.
#ifndef TORCHPROBE_REPORT_COMPILE_SUMMARY_H
#define TORCHPROBE_REPORT_COMPILE_SUMMARY_H

#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <string_view>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

inline constexpr std::string_view kCompiledRegionPrefix = "Torch-Compiled Region";
inline constexpr std::string_view kCacheLookup = "TorchDynamo Cache Lookup";
inline constexpr std::string_view kCompilePhaseSuffix = " (dynamo_timed)";

struct CompileSummary {
  uint64_t regions = 0;          // Torch-Compiled Region slices
  std::set<std::string> graphs;  // their distinct names ("...: 0/0"): compiled graphs
  uint64_t cache_lookups = 0;
  uint64_t compile_phases = 0;   // (dynamo_timed) ranges
  uint64_t compile_ns = 0;       // ... the outermost ones' time
  uint64_t ops = 0;              // outermost op slices (no op around them)
  uint64_t op_ns = 0;
  uint64_t captured_ops = 0;     // ... of them inside a compiled region
  uint64_t captured_ns = 0;
  uint64_t steps = 0;            // ProfilerStep# slices
};

CompileSummary SummarizeCompile(const DecodedTrace& trace);

// "torch.compile" section; nothing when the trace has no compiled region.
void PrintCompile(const CompileSummary& summary, std::ostream& out);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_COMPILE_SUMMARY_H
