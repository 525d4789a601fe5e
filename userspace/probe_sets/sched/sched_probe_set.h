// The thread states probe set (--sched): why each traced thread was not on
// a CPU. Two BTF raw tracepoints (sched_switch, sched_wakeup) for the whole
// run, filtered in BPF to the threads of attached processes; per process,
// the address range of its interpreter's GIL, so that a sleep on a futex
// inside it is told apart as a GIL wait (a process whose CPython layout is
// not known gets none: said once). Each EV_OFFCPU becomes an OffCpu for
// the outputs' thread-state tracks (model/thread_state.h).
#ifndef TORCHPROBE_PROBE_SETS_SCHED_SCHED_PROBE_SET_H
#define TORCHPROBE_PROBE_SETS_SCHED_SCHED_PROBE_SET_H

#include <bpf/libbpf.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "userspace/probe_sets/probe_set.h"

namespace torchprobe {

class SchedProbeSet : public ProbeSet {
 public:
  explicit SchedProbeSet(bool quiet) : quiet_(quiet) {}
  void Configure(BpfConfig& config) const override {
    config.Want("sched_switch");  // sched.bpf.c; none with empty programs
    config.Want("sched_wakeup");
  }
  Status Attach(const TracedProcess& process) override;
  void Release(uint32_t pid) override;
  void Route(EventRouter& router) override;
  void Wire(const ModelWiring& wiring) override;
  void FillStats(TraceStats& stats) override;
  // What the thread is waiting for now, if it is off its CPU: ("state",
  // "asleep (S) in clock_nanosleep for 3.2 s"), from BPF's sched_off map.
  void ThreadNow(uint32_t pid, uint32_t tid, uint64_t now_ns,
                 std::vector<std::pair<std::string, std::string>>& notes) override;
  std::string Summary(const TraceStats& stats) const override;
  void BeforeRemoval() override { links_.clear(); }

 private:
  struct LinkCloser {
    void operator()(bpf_link* link) const { bpf_link__destroy(link); }
  };
  void OnOffCpu(const void* record, size_t size);

  bool quiet_;
  std::vector<std::unique_ptr<bpf_link, LinkCloser>> links_;  // the tracepoints, attached once
  std::set<uint32_t> attached_;
  OpStackModel* model_ = nullptr;
  ThreadStateSink* sink_ = nullptr;  // the window's files that take thread states; null: none
  // Counts of this window (FillStats), and of the run.
  uint64_t offcpu_ = 0, gil_ = 0, unwritten_ = 0;
  uint64_t run_offcpu_ = 0, run_gil_ = 0;
  uint64_t without_gil_ = 0;  // processes whose GIL was not found
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_SCHED_SCHED_PROBE_SET_H
