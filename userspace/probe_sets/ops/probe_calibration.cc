// The record run's probe-cost measurement; see the header.
#include "userspace/probe_sets/ops/probe_calibration.h"

#include <cstdio>
#include <utility>

#include "userspace/discover/calibration_op.h"

namespace torchprobe {

void ProbeCalibration::Start(ProbeCostRoutes routes) {
  pending_ = std::async(std::launch::async, [routes = std::move(routes)]() mutable -> StatusOr<ProbeCost> {
    StatusOr<OpProbe> op = FindCalibrationOp();  // planned like an op, beside the attach
    if (!op.ok()) return op.status();
    routes.entry_offset = op->file_offset;
    routes.return_offsets = op->return_offsets;
    return MeasureProbeCost(routes);
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
}

}  // namespace torchprobe
