// The probe sets a `record` run wires beside the op probes, chosen by its
// options: the one place that lists them.
#ifndef TORCHPROBE_SESSION_PROBE_SETS_H
#define TORCHPROBE_SESSION_PROBE_SETS_H

#include <memory>
#include <vector>

#include "userspace/session/probe_set.h"
#include "userspace/session/record_session.h"

namespace torchprobe {

// Opens what the sets write themselves (a bad path is one line, before
// anything is attached).
StatusOr<std::vector<std::unique_ptr<ProbeSet>>> MakeProbeSets(const RecordOptions& options,
                                                               const OpTable* ops);

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_PROBE_SETS_H
