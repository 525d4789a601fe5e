// The byte ring; see the header. Layout: [Header][record, padded to 8]...,
// a record never split: where one does not fit before the end, the end is
// left unused (a kWrap header marks it when there is room for one) and it
// goes at the start.
#include "userspace/collect/flight_ring.h"

#include <sys/mman.h>

#include <cstring>

namespace torchprobe {

FlightRing::FlightRing(size_t capacity) : capacity_(capacity & ~size_t{7}) {
  // Mapped, not allocated and zeroed: a 256 MB budget costs nothing until used.
  void* memory = capacity_ ? mmap(nullptr, capacity_, PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                           : MAP_FAILED;
  buffer_ = memory == MAP_FAILED ? nullptr : static_cast<uint8_t*>(memory);
  if (!buffer_) capacity_ = 0;
}

FlightRing::~FlightRing() {
  if (buffer_) munmap(buffer_, capacity_);
}

size_t FlightRing::Resolve(size_t at) const {
  if (capacity_ - at < sizeof(Header) || HeaderAt(at).size == kWrap) return 0;
  return at;
}

uint64_t FlightRing::oldest_ns() const { return count_ ? HeaderAt(Resolve(head_)).time_ns : 0; }

void FlightRing::DropOldest() {
  size_t at = Resolve(head_);
  if (at != head_) used_ -= capacity_ - head_;  // the unused end goes with it
  size_t footprint = Footprint(HeaderAt(at).size);
  used_ -= footprint;
  head_ = at + footprint;
  if (--count_ == 0) head_ = tail_ = used_ = 0;
}

bool FlightRing::Push(const void* record, size_t size, uint64_t time_ns) {
  size_t need = Footprint(size);
  if (size >= kWrap || need > capacity_) {
    ++too_large_;
    return false;
  }
  size_t at = 0;
  for (;;) {
    if (count_ == 0) {
      at = 0;
      break;
    }
    if (tail_ > head_) {  // free: [tail_, end) and [0, head_)
      if (capacity_ - tail_ >= need) {
        at = tail_;
        break;
      }
      if (head_ >= need) {  // the end stays unused: wrap
        if (capacity_ - tail_ >= sizeof(Header)) {
          Header wrap{kWrap, 0, 0};
          std::memcpy(buffer_ + tail_, &wrap, sizeof wrap);
        }
        used_ += capacity_ - tail_;
        at = 0;
        break;
      }
    } else if (head_ - tail_ >= need) {  // free: [tail_, head_)
      at = tail_;
      break;
    }
    DropOldest();
    ++dropped_for_room_;
  }
  Header header{static_cast<uint32_t>(size), 0, time_ns};
  std::memcpy(buffer_ + at, &header, sizeof header);
  std::memcpy(buffer_ + at + sizeof header, record, size);
  tail_ = at + need;
  used_ += need;
  ++count_;
  newest_ns_ = time_ns;
  return true;
}

void FlightRing::DropBefore(uint64_t oldest_ns) {
  while (count_ && HeaderAt(Resolve(head_)).time_ns < oldest_ns) {
    DropOldest();
    ++dropped_for_age_;
  }
}

void FlightRing::ForEach(const std::function<void(const void*, size_t)>& each) const {
  size_t at = head_;
  for (uint64_t i = 0; i < count_; ++i) {
    at = Resolve(at);
    const Header& header = HeaderAt(at);
    each(buffer_ + at + sizeof(Header), header.size);
    at += Footprint(header.size);
  }
}

}  // namespace torchprobe
