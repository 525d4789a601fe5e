// The record run's probe-cost measurement; see the header.
#include "userspace/probe_sets/ops/probe_calibration.h"

#include <cstdio>
#include <utility>

#include "userspace/discover/calibration_op.h"
#include "userspace/discover/probe_plan_cache.h"
#include "userspace/probe_sets/ops/probe_cost_cache.h"

namespace torchprobe {

void ProbeCalibration::Start(ProbeCostRoutes routes) {
  std::string folder = PlanCacheFolder(), key = ProbeCostKey(routes);
  uint64_t age_s = 0;
  if (std::optional<ProbeCost> kept = LoadProbeCost(folder, key, &age_s)) {
    cost_ = kept;
    kept_age_s_ = age_s;
    return;
  }
  pending_ = std::async(std::launch::async, [routes = std::move(routes), folder, key]() mutable -> StatusOr<ProbeCost> {
    StatusOr<OpProbe> op = FindCalibrationOp();  // planned like an op, beside the attach
    if (!op.ok()) return op.status();
    routes.entry_offset = op->file_offset;
    routes.return_offsets = op->return_offsets;
    StatusOr<ProbeCost> cost = MeasureProbeCost(routes);
    if (cost.ok()) StoreProbeCost(folder, key, *cost);
    return cost;
  });
}

void ProbeCalibration::Fill(TraceStats& stats, bool quiet) {
  if (pending_.valid()) {
    StatusOr<ProbeCost> cost = pending_.get();
    if (cost.ok()) cost_ = *cost;
    else if (!quiet)
      std::fprintf(stderr, "torchprobe: probe cost not estimated: %s\n", cost.status().message().c_str());
  }
  if (cost_) PutProbeCost(*cost_, &stats);
  if (cost_ && kept_age_s_) {
    stats.Count(kProbeCostKept, StatsScope::kRun) = 1;
    stats.Count(kProbeCostAgeS, StatsScope::kRun) = *kept_age_s_;
  }
}

}  // namespace torchprobe
