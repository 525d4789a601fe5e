// The probe sets a `record` run wires, chosen by its options: the one place
// that lists them. The ops set comes first (a process is traced once its
// libtorch ops are attached); the others attach beside it.
#ifndef TORCHPROBE_SESSION_PROBE_SET_REGISTRY_H
#define TORCHPROBE_SESSION_PROBE_SET_REGISTRY_H

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "userspace/probe_sets/ops/ops_probe_set.h"
#include "userspace/probe_sets/probe_set.h"
#include "userspace/session/record_session.h"

namespace torchprobe {

struct RunProbeSets {
  std::vector<std::unique_ptr<ProbeSet>> all;  // the ops set first
  OpsProbeSet* ops = nullptr;
};

// Opens what the sets write themselves (a bad path is one line, before
// anything is attached). `ops`: the run's op table, which sets append to.
StatusOr<RunProbeSets> MakeProbeSets(const RecordOptions& options, OpTable* ops);

// The flight recorder's light tier: which ops are probed. c10d collectives
// and the backend calls that run them (gloo:*, NCCL), CUDA synchronizations
// (`...Synchronize`), and an op that is the step marker; annotations (an annotation step marker among them)
// come from their own set.
std::function<bool(const OpProbe&)> LightTierProbe(const std::string& step_marker);

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_PROBE_SET_REGISTRY_H
