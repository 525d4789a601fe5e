// The probes' calibration (attach/probe_cost.h), kept for a while in the
// plan cache's folder (discover/probe_plan_cache.h) so that a run of short
// captures (the agent's windows) does not measure it every time: each
// measurement loads a BPF object of its own and runs rounds of probed calls,
// ~300 ms of CPU beside the target on a small host.
//
// A kept cost is used only on the same boot, kernel and torchprobe binary
// (device, inode, size and mtime of /proc/self/exe), for the same routes,
// and for kMaxAgeS after it was measured: the host's load changes what a
// trap costs. The trace says it was kept, and how old it was.
#ifndef TORCHPROBE_PROBE_SETS_OPS_PROBE_COST_CACHE_H
#define TORCHPROBE_PROBE_SETS_OPS_PROBE_COST_CACHE_H

#include <cstdint>
#include <optional>
#include <string>

#include "userspace/attach/probe_cost.h"
#include "userspace/base/probe_cost_kept.h"  // the trace says a cost was kept

namespace torchprobe {

inline constexpr uint64_t kProbeCostMaxAgeS = 600;

// What this host, boot and binary measure under: "" when it cannot be told.
std::string ProbeCostKey(const ProbeCostRoutes& routes);

// The cost kept in `folder` for `key`, measured at most kProbeCostMaxAgeS
// ago (*age_s: how long ago); nullopt when none is.
std::optional<ProbeCost> LoadProbeCost(const std::string& folder, const std::string& key, uint64_t* age_s);

// Keeps `cost` for `key` (errors ignored: the cache only saves time).
void StoreProbeCost(const std::string& folder, const std::string& key, const ProbeCost& cost);

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_OPS_PROBE_COST_CACHE_H
