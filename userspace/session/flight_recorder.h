// `record --flight-recorder SECS`: a capture mode in which nothing is written
// until something goes wrong. The op ring's records are kept, copied, in a
// bounded in-memory ring (collect/flight_ring) instead of being decoded; a
// dump replays them through the router into a fresh model and the run's
// writers (CaptureWindows::WriteDump), named by host, pid, rank, reason and
// time, with a stall report beside it (export/stall_report). Dumps come on
// request (SIGUSR2), when a traced process goes without a step boundary for
// max(--stall-factor x its median step, --stall-after), when a traced
// process dies by a signal, and when an allocator raises an out-of-memory
// error (the oom probe set's event); the recorder goes on after each.
//
// Entries of ops and ranges still open are kept apart from the ring too,
// so a dump shows what a thread has been stuck in for longer than the ring
// holds (a rank waiting in a collective for minutes).
#ifndef TORCHPROBE_SESSION_FLIGHT_RECORDER_H
#define TORCHPROBE_SESSION_FLIGHT_RECORDER_H

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bpf/events.h"
#include "userspace/base/op_table.h"
#include "userspace/collect/event_router.h"
#include "userspace/collect/flight_ring.h"
#include "userspace/export/stall_report.h"
#include "userspace/session/capture_windows.h"
#include "userspace/session/proc_names.h"
#include "userspace/session/record_session.h"

namespace torchprobe {

class FlightRecorder {
 public:
  FlightRecorder(const RecordOptions& options, CaptureWindows* windows, EventRouter* router, OpTable* ops,
                 ProcNames* names);

  // Asked at a dump for each live thread: what the probe sets can tell of
  // it now (ProbeSet::ThreadNow).
  using ThreadNow = std::function<void(uint32_t pid, uint32_t tid, uint64_t now_ns,
                                       std::vector<std::pair<std::string, std::string>>& notes)>;
  void SetThreadNow(ThreadNow thread_now) { thread_now_ = std::move(thread_now); }
  // The targets are attached: says so (one line) unless quiet.
  void Started() const;
  // One op-ring record, as read: kept (the hot path).
  void Keep(const void* record, size_t size);
  // A thread of a traced process exited; a leader killed by a signal dumps.
  void Exited(const tp_proc_event& exit);
  // One turn of the loop: old records go; a request (a new SIGUSR2) or a
  // stall dumps.
  void Poll(uint64_t now_ns, int dump_requests);

  // For the run's summary: "2 flight recorder dumps: a.pftrace, b.pftrace",
  // or what the ring held when none was asked for.
  std::string Describe() const;
  size_t dumps() const { return dumps_.size(); }
  uint64_t kept() const { return kept_; }  // op-ring records kept since the start

 private:
  struct Pending {  // an entry whose op or range is open, by when it was kept
    uint64_t seq = 0;
    uint64_t frame = 0;   // ops: the call's frame; ranges: 0
    uint64_t record = 0;  // ranges: the RecordFunction; ops: 0
    std::string bytes;
  };
  struct Steps {
    uint64_t last_ns = 0;
    uint64_t seen = 0;
    std::vector<uint64_t> intervals;  // the last kStepHistory
    bool stalled = false;             // dumped for this stall already
  };
  struct Group {
    int32_t rank = -1, size = 0;
    uint64_t entered = 0, last_begin_ns = 0;
    uint32_t last_op = 0;
  };

  void Remember(const tp_event_header& header);
  void TrackOpen(const void* record, size_t size, const tp_event_header& header);
  bool IsMarker(uint32_t op_id);
  void Step(uint32_t pid, uint64_t ts_ns);
  uint64_t MedianStep(const Steps& steps) const;
  void Dump(const std::string& reason, const std::string& detail, uint32_t pid, uint64_t now_ns);
  StallReport Report(const OpStackModel& model, const std::string& reason, const std::string& detail,
                     uint64_t from_ns, uint64_t now_ns, uint32_t pid);

  const RecordOptions& options_;
  CaptureWindows* windows_;
  EventRouter* router_;
  OpTable* ops_;
  ProcNames* names_;
  ThreadNow thread_now_;
  std::string host_;
  std::string marker_;
  FlightRing ring_;
  uint64_t kept_ = 0;  // records kept so far: the sequence of the next
  std::unordered_map<uint64_t, std::vector<Pending>> open_;  // by pid << 32 | tid
  std::unordered_set<uint64_t> seen_threads_;
  std::vector<int8_t> marker_ops_;  // by op id: -1 unknown, 0 no, 1 the step marker
  std::map<uint32_t, Steps> steps_;
  std::map<std::pair<uint32_t, uint64_t>, Group> groups_;  // (pid, group address)
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, uint64_t> collective_seq_;  // (pid, tid, begin) -> n
  std::map<uint32_t, std::string> ended_;  // pid -> how it ended
  int requests_seen_ = 0;
  struct PendingOom {  // an out-of-memory error to dump (pid 0: none)
    uint32_t pid = 0, tid = 0;
    uint64_t ts_ns = 0;
    bool caught = false;  // its thread's unwind is kept
    std::string detail;
  };
  PendingOom oom_;
  uint64_t last_stall_dump_ns_ = 0;
  std::vector<std::string> dumps_;
  uint64_t failed_dumps_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_FLIGHT_RECORDER_H
