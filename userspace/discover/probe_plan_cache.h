// A disk cache of op probe plans (FindOpProbes' result), for processes that
// take many short captures of the same libtorch: planning Debian's 1.13
// libtorch_cpu (ELF symbols, schema strings, disassembly for return sites)
// takes ~2 s of every `record`, the same 2 s each time. `torchprobe agent`
// turns it on for its windows, so that a triggered window starts within a
// second; plain `record` does not use it.
//
// On only when $TORCHPROBE_PLAN_CACHE names a folder. A plan is keyed by the
// image's device, inode, size and mtime (ns) and the format version below, so
// a rebuilt or replaced library is planned again. Files are written
// atomically; one that does not read back whole is ignored (and replanned).
#ifndef TORCHPROBE_DISCOVER_PROBE_PLAN_CACHE_H
#define TORCHPROBE_DISCOVER_PROBE_PLAN_CACHE_H

#include <string>

#include "userspace/discover/op_probes.h"

namespace torchprobe {

inline constexpr const char* kPlanCacheEnv = "TORCHPROBE_PLAN_CACHE";

// The cache file for `elf_path` ("" when the cache is off or the image cannot
// be stat'ed).
std::string PlanCachePath(const std::string& elf_path);
// Reads a plan back; false when there is none or it does not read whole.
bool LoadProbePlan(const std::string& cache_path, OpProbeSet* set);
// Writes it (errors are ignored: the cache only saves time).
void StoreProbePlan(const std::string& cache_path, const OpProbeSet& set);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_PROBE_PLAN_CACHE_H
