// Drains the op ring buffer (no wakeups: read on a timer) and the control
// ring buffer (wakes the reader) into an EventRouter, on the caller's thread.
#ifndef TORCHPROBE_COLLECT_RING_READER_H
#define TORCHPROBE_COLLECT_RING_READER_H

#include <functional>

#include "userspace/base/status.h"
#include "userspace/collect/event_router.h"

struct ring_buffer;

namespace torchprobe {

class RingReader {
 public:
  explicit RingReader(EventRouter* router) : router_(router) {}
  ~RingReader();
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;

  Status Open(int events_fd, int ctl_events_fd);
  // The op ring's records go to `keep` instead of the router (a flight
  // recorder keeps them to replay later); the control ring's still route.
  // Before the first Poll.
  void DivertOpRecords(std::function<void(const void* record, size_t size)> keep) { keep_ = std::move(keep); }
  // Waits up to `timeout_ms` for a control event, then drains both rings,
  // at most `kDrainBudget` records, so that a producer as fast as the reader
  // cannot keep it from returning (libbpf 1.1 consumes until empty). An
  // interrupted wait (a signal) is a normal return.
  // The control ring is read before the op ring in each drain, so a thread's
  // exit is seen before (or with) its last op events: act on it only after a
  // drain that left nothing (`*more` false).
  Status Poll(int timeout_ms, bool* more = nullptr);
  // Drains the rings, at most `kDrainBudget` records; true in *more when
  // records were left for the next call.
  Status Drain(bool* more = nullptr);
  // Drains until empty: for after the probes are detached.
  Status DrainAll();
  static constexpr uint64_t kDrainBudget = 1 << 20;
  const DecodeStats& stats() const { return router_->stats(); }

 private:
  static int OnRecord(void* ctx, void* data, size_t size);
  static int OnOpRecord(void* ctx, void* data, size_t size);
  EventRouter* router_;
  std::function<void(const void*, size_t)> keep_;
  uint64_t drained_ = 0;  // records in the current Drain()
  ring_buffer* rb_ = nullptr;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_COLLECT_RING_READER_H
