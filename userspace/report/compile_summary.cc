// torch.compile's figures from the decoded slices; see the header.
#include "userspace/report/compile_summary.h"

#include <vector>

#include "userspace/model/step_slicer.h"
#include "userspace/report/text_format.h"

namespace torchprobe {

CompileSummary SummarizeCompile(const DecodedTrace& trace) {
  CompileSummary s;
  for (const DecodedThread& t : trace.threads) {
    // Per slice (pre-order, parents first): inside an op, inside a region,
    // inside a compile phase.
    std::vector<uint8_t> in_op(t.slices.size()), in_region(t.slices.size()), in_phase(t.slices.size());
    for (size_t i = 0; i < t.slices.size(); ++i) {
      const DecodedSlice& slice = t.slices[i];
      const OpInfo& info = trace.ops[slice.op];
      uint64_t ns = slice.end_ns - slice.begin_ns;
      bool is_op = info.category.empty();
      bool is_region = !is_op && info.name.starts_with(kCompiledRegionPrefix);
      bool is_phase = !is_op && info.name.ends_with(kCompilePhaseSuffix);
      bool op_above = slice.parent >= 0 && in_op[slice.parent];
      bool region_above = slice.parent >= 0 && in_region[slice.parent];
      bool phase_above = slice.parent >= 0 && in_phase[slice.parent];
      in_op[i] = is_op || op_above;
      in_region[i] = is_region || region_above;
      in_phase[i] = is_phase || phase_above;
      if (is_region) {
        ++s.regions;
        s.graphs.insert(info.name);
      }
      if (!is_op && info.name == kCacheLookup) ++s.cache_lookups;
      if (!is_op && info.name.starts_with(kStepPrefix)) ++s.steps;
      if (is_phase) {
        ++s.compile_phases;
        if (!phase_above) s.compile_ns += ns;
      }
      if (!is_op || op_above) continue;
      ++s.ops;
      s.op_ns += ns;
      if (region_above) {
        ++s.captured_ops;
        s.captured_ns += ns;
      }
    }
  }
  return s;
}

void PrintCompile(const CompileSummary& s, std::ostream& out) {
  if (s.regions == 0) return;
  out << "\ntorch.compile: " << s.regions << " compiled regions of " << s.graphs.size()
      << " compiled graphs, " << s.cache_lookups << " cache lookups, " << s.compile_phases
      << " compile phases (" << FormatTime(s.compile_ns) << ")\n";
  out << "  ops inside compiled regions: " << s.captured_ops << " of " << s.ops << " ("
      << FormatShare(s.captured_ops, s.ops) << "), " << FormatTime(s.captured_ns) << " of "
      << FormatTime(s.op_ns) << " in ops (" << FormatShare(s.captured_ns, s.op_ns) << ")\n";
  if (s.steps > 0) {
    char per_step[32];
    std::snprintf(per_step, sizeof(per_step), "%.2f", static_cast<double>(s.regions) / s.steps);
    out << "  regions per step: " << per_step << " over " << s.steps
        << " steps (more than one region per graph a step: graph breaks)\n";
  }
}

}  // namespace torchprobe
