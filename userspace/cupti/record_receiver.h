// torchprobe's end of the record stream (record_stream.h): a unix datagram
// socket in the abstract namespace (so a target in a chroot or container
// with our network namespace reaches it). A thread of its own empties the
// socket as datagrams come (the kernel queues only max_dgram_qlen of them,
// 10 by default); the record session's poll loop parses what it took.
// Records become GpuJoin input, with each
// process' timestamps put on CLOCK_MONOTONIC; what the collectors lost or
// could not do is counted (PutStats) and each note said once on stderr.
#ifndef TORCHPROBE_CUPTI_RECORD_RECEIVER_H
#define TORCHPROBE_CUPTI_RECORD_RECEIVER_H

#include <cstddef>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "userspace/cupti/record_dump.h"
#include "userspace/cupti/record_stream.h"
#include "userspace/model/gpu_join.h"
#include "userspace/status.h"

namespace torchprobe {

class CuptiReceiver {
 public:
  // A receiver that feeds `join`; `quiet`: notes are counted, not printed.
  CuptiReceiver(GpuJoin* join, bool quiet) : join_(join), quiet_(quiet) {}
  ~CuptiReceiver();

  // Binds the socket; the value for $TORCHPROBE_CUPTI_SOCKET is address().
  Status Listen();
  const std::string& address() const { return address_; }
  // The environment a launched command gets: CUDA_INJECTION64_PATH = the
  // collector `collector_path`, and the socket's address.
  void ExportEnvironment(const std::string& collector_path) const;

  // Parses every datagram the reading thread took.
  void Poll();
  // At the stop: reads until no datagram came for `quiet_ns` (the
  // collector flushes every 100 ms) or `max_ns` passed; only what is
  // already there when no collector ever said hello.
  void Drain(uint64_t quiet_ns, uint64_t max_ns);
  // Parses whole records, back to back (a datagram, or a test's stream).
  void Feed(const uint8_t* data, size_t size);
  void PutStats(TraceStats* stats) const;
  // Whether any collector said hello or sent a note.
  bool heard_from() const { return !clocks_.empty() || !notes_said_.empty(); }

 private:
  struct ProcessClock {
    int64_t offset_ns = 0;  // added to the process' CUPTI timestamps
  };
  uint64_t Time(uint32_t pid, uint64_t cupti_ns) const;
  void ReadLoop();  // the reading thread
  void OnRecord(const uint8_t* record, size_t size);

  GpuJoin* join_;
  bool quiet_;
  int fd_ = -1;
  std::string address_;
  std::map<uint32_t, ProcessClock> clocks_;  // by pid: those whose collector said hello
  std::set<std::string> notes_said_;
  std::map<uint32_t, tpc_drops> counts_;  // by pid: the collector's last counts
  std::unordered_map<std::string, std::string> kernel_names_;  // mangled -> demangled
  uint64_t unreadable_ = 0;
  RecordDump dump_;  // $TORCHPROBE_CUPTI_DUMP

  std::thread reader_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> last_datagram_ns_{0};
  std::mutex inbox_mutex_;
  std::vector<std::vector<uint8_t>> inbox_;  // taken, not yet parsed; under inbox_mutex_
};

// Where the collector library is: beside the torchprobe binary.
std::string CollectorPath();

}  // namespace torchprobe

#endif  // TORCHPROBE_CUPTI_RECORD_RECEIVER_H
