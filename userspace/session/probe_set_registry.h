// The probe sets a `record` run wires, chosen by its options: the one place
// that lists them. The ops set comes first (a process is traced once its
// libtorch ops are attached); the others attach beside it.
#ifndef TORCHPROBE_SESSION_PROBE_SET_REGISTRY_H
#define TORCHPROBE_SESSION_PROBE_SET_REGISTRY_H

#include <memory>
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

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_PROBE_SET_REGISTRY_H
