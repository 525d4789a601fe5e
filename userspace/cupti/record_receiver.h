// torchprobe's end of the record stream (record_stream.h): the datagrams
// the run's own processes sent (datagram_inbox.h: the socket, whose
// credentials say who sent each, and its bounded queues), parsed by the
// record session's poll loop. Records go to a GpuRecordSink (the model's GpuJoin), each put on
// its sender's pid whatever its header says, with each process'
// timestamps put on CLOCK_MONOTONIC; what the collectors lost or could
// not do is counted (PutStats) and each note said once on stderr, as
// printable ASCII on one line.
#ifndef TORCHPROBE_CUPTI_RECORD_RECEIVER_H
#define TORCHPROBE_CUPTI_RECORD_RECEIVER_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "userspace/base/gpu_records.h"
#include "userspace/base/status.h"
#include "userspace/base/trace_stats.h"
#include "userspace/cupti/datagram_inbox.h"
#include "userspace/cupti/record_dump.h"
#include "userspace/cupti/record_stream.h"

namespace torchprobe {

// How much the receiver holds; record_receiver.cc says why these sizes.
struct ReceiverBounds {
  size_t kept_bytes = 64 << 20;  // datagrams of the run's processes not parsed yet
  size_t held_bytes = 16 << 20;  // ... of senders the session has not named yet
  size_t notes = 32;             // distinct notes said
  size_t kernel_names = 4096;    // kernel names demangled once (the others: each time)
};

class CuptiReceiver {
 public:
  // A receiver that feeds `join`; `quiet`: notes are counted, not printed.
  CuptiReceiver(GpuRecordSink* join, bool quiet, const ReceiverBounds& bounds = {})
      : join_(join), quiet_(quiet), bounds_(bounds), inbox_(bounds.kept_bytes, bounds.held_bytes) {}

  // Binds the socket; the value for $TORCHPROBE_CUPTI_SOCKET is address().
  Status Listen() { return inbox_.Listen(); }
  const std::string& address() const { return inbox_.address(); }
  // The environment a launched command gets: CUDA_INJECTION64_PATH = the
  // collector `collector_path`, and the socket's address.
  void ExportEnvironment(const std::string& collector_path) const;

  // Who is heard (datagram_inbox.h): `pid` is one of the run's processes
  // from `since_ns` on (0: from before the run); its process exited.
  void Accept(uint32_t pid, uint64_t since_ns) { inbox_.Accept(pid, since_ns); }
  void Forget(uint32_t pid) { inbox_.Forget(pid); }

  // Parses every datagram of the run's processes taken; `known_ns`: every
  // process that became one of the run's before then has been accepted.
  void Poll(uint64_t known_ns);
  // At the stop: reads until no datagram came for `quiet_ns` (the
  // collector flushes every 100 ms) or `max_ns` passed; only what is
  // already there when no collector ever said hello. Then refuses what
  // senders never named sent.
  void Drain(uint64_t quiet_ns, uint64_t max_ns);
  // Parses whole records, back to back (a datagram, or a test's stream),
  // each put on `sender` (0: on the pid its header names).
  void Feed(const uint8_t* data, size_t size, uint32_t sender = 0);
  // The counts; those that are this receiver's own (refused, over a bound)
  // are added: what happened since the last call.
  void PutStats(TraceStats* stats);
  // Whether any collector said hello or sent a note.
  bool heard_from() const { return !clocks_.empty() || !notes_said_.empty(); }

 private:
  struct ProcessClock {
    int64_t offset_ns = 0;  // added to the process' CUPTI timestamps
  };
  uint64_t Time(uint32_t pid, uint64_t cupti_ns) const;
  void OnRecord(uint32_t pid, const uint8_t* record, size_t size);
  const std::string& KernelName(const std::string& mangled);
  void SayNote(uint32_t pid, const uint8_t* text, size_t size);

  GpuRecordSink* join_;  // model/gpu_join in a run
  bool quiet_;
  const ReceiverBounds bounds_;
  uint64_t known_ns_ = 0;  // the last Poll's
  std::map<uint32_t, ProcessClock> clocks_;  // by pid: those whose collector said hello
  std::set<std::string> notes_said_;         // at most bounds_.notes
  std::map<uint32_t, tpc_drops> counts_;  // by pid: the collector's last counts
  std::unordered_map<std::string, std::string> kernel_names_;  // mangled -> demangled
  std::string kernel_name_;  // KernelName's answer past bounds_.kernel_names
  uint64_t unreadable_ = 0;
  uint64_t notes_over_bound_ = 0;
  DatagramInbox::Counts reported_;  // the inbox's counts at the last PutStats
  uint64_t notes_reported_ = 0;     // ... and notes_over_bound_
  RecordDump dump_;  // $TORCHPROBE_CUPTI_DUMP
  DatagramInbox inbox_;  // last: its reading thread stops first
};

// Where the collector library is: beside the torchprobe binary.
std::string CollectorPath();

}  // namespace torchprobe

#endif  // TORCHPROBE_CUPTI_RECORD_RECEIVER_H
