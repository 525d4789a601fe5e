// The out-of-memory probe set: libc10's c10::ThrowEnforceNotMet and
// c10::reportOutOfMemoryToProfiler on each traced process (both fire only
// on a failure: nothing to pay while a job runs). An allocator's out-of-memory
// error is counted and said in the run's summary, with where and in which
// process; a flight recorder (session/flight_recorder) dumps on it. On with
// --flight-recorder only (probe_set_registry).
#ifndef TORCHPROBE_PROBE_SETS_OOM_OOM_PROBE_SET_H
#define TORCHPROBE_PROBE_SETS_OOM_OOM_PROBE_SET_H

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "userspace/attach/probe_links.h"
#include "userspace/discover/oom_probes.h"
#include "userspace/probe_sets/probe_set.h"

namespace torchprobe {

class OomProbeSet : public ProbeSet {
 public:
  void Configure(BpfConfig& config) const override {
    for (const char* entry : {"oom_enforce", "oom_device"}) config.Want(entry, "empty_enter");
  }
  Status Attach(const TracedProcess& process) override;
  void Release(uint32_t pid) override { links_.erase(pid); }
  void Route(EventRouter& router) override;
  std::string Summary(const TraceStats& stats) const override;

 private:
  std::map<std::string, StatusOr<OomProbes>> plans_;  // by libc10's identity
  std::map<uint32_t, std::vector<ProbeLinks>> links_;  // by pid
  std::vector<std::string> seen_;                      // "pid P at where", each out-of-memory error
  std::set<std::pair<uint32_t, uint64_t>> counted_;    // (tid, time) of each, seen once
  uint64_t unprobed_ = 0;                              // processes whose libc10 could not be probed
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_OOM_OOM_PROBE_SET_H
