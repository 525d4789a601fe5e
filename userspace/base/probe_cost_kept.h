// The stats section counts that say a trace's probe cost was kept from an
// earlier run's calibration (probe_sets/ops/probe_cost_cache.h writes them,
// report reads them): named once, for both.
#ifndef TORCHPROBE_BASE_PROBE_COST_KEPT_H
#define TORCHPROBE_BASE_PROBE_COST_KEPT_H

namespace torchprobe {

inline constexpr const char* kProbeCostKept = "ops.probe_cost_kept";    // 1: kept, not measured
inline constexpr const char* kProbeCostAgeS = "ops.probe_cost_age_s";  // how old it was, seconds

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_PROBE_COST_KEPT_H
