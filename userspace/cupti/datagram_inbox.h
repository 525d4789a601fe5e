// torchprobe's end of the CUPTI socket, before any record is parsed: who
// sent each datagram, and how much is held. The socket is in the abstract
// namespace (a target in a chroot or a container with our network namespace
// reaches it), so any local process can send to it: the kernel's
// credentials (SO_PASSCRED) name each datagram's sender, as torchprobe's
// pid namespace numbers it, and only the run's own processes (launched,
// forked by one, named or injected: Accept) are heard. A sender the session
// has not named yet (a grandchild that initialized CUDA before its fork
// event was read) is held, bounded, until the session has read every fork
// made before the datagram came (Take's `known_ns`): then it is the run's,
// or refused and counted. A sender in a pid namespace that does not see
// ours has pid 0 and is refused.
//
// A thread of its own empties the socket as datagrams come (the kernel
// queues only max_dgram_qlen of them, 10 by default); the record session's
// poll loop takes what it kept. Every queue is bounded; what does not fit
// is counted.
#ifndef TORCHPROBE_CUPTI_DATAGRAM_INBOX_H
#define TORCHPROBE_CUPTI_DATAGRAM_INBOX_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

struct Datagram {
  uint32_t sender = 0;         // its process, as the kernel says (not as its records say)
  uint64_t arrived_ns = 0;     // CLOCK_MONOTONIC, when the reading thread took it
  std::vector<uint8_t> bytes;  // whole records, back to back
};

class DatagramInbox {
 public:
  // `kept_bytes`: datagrams of the run's processes not taken yet; `held_bytes`:
  // those of senders not named yet (record_receiver.cc says why these sizes).
  DatagramInbox(size_t kept_bytes, size_t held_bytes) : kept_limit_(kept_bytes), held_limit_(held_bytes) {}
  ~DatagramInbox();
  DatagramInbox(const DatagramInbox&) = delete;
  DatagramInbox& operator=(const DatagramInbox&) = delete;

  // Binds the socket and starts the reading thread.
  Status Listen();
  // "@name": what the collector connects to.
  const std::string& address() const { return address_; }

  // `pid` is one of the run's processes from `since_ns` on (CLOCK_MONOTONIC;
  // 0: from before the run). What it sent before is judged first; its
  // datagrams held meanwhile are kept, in order, unless they came before
  // `since_ns` (another process that had its pid). A pid already accepted
  // stays as it was.
  void Accept(uint32_t pid, uint64_t since_ns);
  // `pid`'s process exited: what it sent is kept (the socket is read first),
  // and from now on its pid may be another process': refused.
  void Forget(uint32_t pid);
  // The datagrams of the run's processes kept since the last call, in the
  // order they came. Those held whose sender was still not named and that
  // came before `known_ns` (every process that became one of the run's by
  // then has been accepted) are refused.
  std::vector<Datagram> Take(uint64_t known_ns);
  // Reads what waits in the socket now, without waiting for the thread.
  void ReadWaiting();
  // Refuses every datagram still held (the trace ends: a sender not named
  // by now is not one of its processes).
  void RefuseHeld();

  // When the last datagram of the run's processes came (0: none yet).
  uint64_t last_kept_ns() const { return last_kept_ns_.load(); }
  struct Counts {
    uint64_t refused = 0;     // datagrams from processes not the run's (or held past held_bytes)
    uint64_t over_bound = 0;  // records of the run's processes past kept_bytes, left out
  };
  Counts counts() const;

 private:
  void ReadLoop();  // the reading thread
  // Under mutex_: reads the socket until it is empty.
  void ReadAvailableLocked();
  void KeepLocked(Datagram datagram);
  void RefuseLocked();

  const size_t kept_limit_;
  const size_t held_limit_;
  int fd_ = -1;
  std::string address_;
  std::thread reader_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> last_kept_ns_{0};

  mutable std::mutex mutex_;  // everything below
  std::map<uint32_t, uint64_t> accepted_;  // pid -> since_ns
  std::vector<Datagram> kept_;  // the run's, not taken yet
  size_t kept_bytes_ = 0;
  std::deque<Datagram> held_;   // senders not named yet, in the order they came
  size_t held_bytes_ = 0;
  Counts counts_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_CUPTI_DATAGRAM_INBOX_H
