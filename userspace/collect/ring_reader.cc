// libbpf ring_buffer around our decoder; see the header.
#include "userspace/collect/ring_reader.h"

#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>

namespace torchprobe {

RingReader::~RingReader() { ring_buffer__free(rb_); }

namespace {
// Returned by the callback to end a drain; libbpf has already consumed the
// record it was called for, so nothing is lost.
constexpr int kBudgetSpent = -EAGAIN;
}  // namespace

int RingReader::OnRecord(void* ctx, void* data, size_t size) {
  auto* reader = static_cast<RingReader*>(ctx);
  reader->router_->Route(data, size);  // bad records are counted
  return ++reader->drained_ >= kDrainBudget ? kBudgetSpent : 0;
}

int RingReader::OnOpRecord(void* ctx, void* data, size_t size) {
  auto* reader = static_cast<RingReader*>(ctx);
  if (!reader->keep_) return OnRecord(ctx, data, size);
  reader->keep_(data, size);
  return ++reader->drained_ >= kDrainBudget ? kBudgetSpent : 0;
}

Status RingReader::Open(int events_fd, int ctl_events_fd) {
  rb_ = ring_buffer__new(ctl_events_fd, OnRecord, this, nullptr);
  if (!rb_) return Status::Error(std::string("cannot open the ring buffer: ") + strerror(errno));
  if (ring_buffer__add(rb_, events_fd, OnOpRecord, this) != 0)
    return Status::Error(std::string("cannot open the ring buffer: ") + strerror(errno));
  return Status::Ok();
}

Status RingReader::Poll(int timeout_ms, bool* more) {
  drained_ = 0;
  int n = ring_buffer__poll(rb_, timeout_ms);
  if (n < 0 && n != -EINTR && n != kBudgetSpent)
    return Status::Error(std::string("cannot poll the ring buffer: ") + strerror(-n));
  return Drain(more);
}

Status RingReader::Drain(bool* more) {
  drained_ = 0;
  int n = ring_buffer__consume(rb_);
  if (more) *more = n == kBudgetSpent;
  if (n < 0 && n != -EINTR && n != kBudgetSpent)
    return Status::Error(std::string("cannot read the ring buffer: ") + strerror(-n));
  return Status::Ok();
}

Status RingReader::DrainAll() {
  bool more = true;
  Status status = Status::Ok();
  while (more && status.ok()) status = Drain(&more);
  return status;
}

}  // namespace torchprobe
