// The probes' own cost for a record run's stats: measured on a child of
// torchprobe beside the attach (attach/probe_cost.h), on the calibration
// function planned like an op (discover/calibration_op.h), and put in the
// stats of every output; the first output to be finished waits for it.
// With a plan cache (the agent's windows), a cost measured there in the
// last minutes is used instead (probe_cost_cache.h), and said.
#ifndef TORCHPROBE_PROBE_SETS_OPS_PROBE_CALIBRATION_H
#define TORCHPROBE_PROBE_SETS_OPS_PROBE_CALIBRATION_H

#include <future>
#include <optional>

#include "userspace/attach/probe_cost.h"
#include "userspace/base/status.h"
#include "userspace/base/trace_stats.h"

namespace torchprobe {

class ProbeCalibration {
 public:
  // Starts measuring `routes` on another thread.
  void Start(ProbeCostRoutes routes);
  // The cost into `stats` (waits for the measurement the first time); a
  // failed one is said once on stderr unless `quiet`, and leaves no cost.
  void Fill(TraceStats& stats, bool quiet);

 private:
  std::future<StatusOr<ProbeCost>> pending_;
  std::optional<ProbeCost> cost_;  // once pending_ is taken, or kept from an earlier run
  std::optional<uint64_t> kept_age_s_;  // a kept cost: how long ago it was measured
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_OPS_PROBE_CALIBRATION_H
