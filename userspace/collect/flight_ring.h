// The flight recorder's memory: copies of the newest op-ring records, in the
// order they were read, within a byte budget. Room for a new record is made
// by dropping the oldest (counted), never the newest; records older than the
// recorder's span are dropped too. Nothing is decoded here: a dump replays
// the records through the router into a fresh model.
#ifndef TORCHPROBE_COLLECT_FLIGHT_RING_H
#define TORCHPROBE_COLLECT_FLIGHT_RING_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace torchprobe {

class FlightRing {
 public:
  // `capacity` bytes in all, headers included (rounded down to 8); the
  // memory is reserved, not touched, until records fill it.
  explicit FlightRing(size_t capacity);
  ~FlightRing();
  FlightRing(const FlightRing&) = delete;
  FlightRing& operator=(const FlightRing&) = delete;

  // Keeps a copy of one record, `time_ns` its time (its header's ts_ns);
  // false (counted in too_large) for one larger than the whole ring.
  bool Push(const void* record, size_t size, uint64_t time_ns);
  // Drops the records older than `oldest_ns`, oldest first; stops at the
  // first newer one (records are kept in reading order, which is close to,
  // not exactly, time order across CPUs).
  void DropBefore(uint64_t oldest_ns);
  // Each record kept, oldest first.
  void ForEach(const std::function<void(const void* record, size_t size)>& each) const;

  size_t capacity() const { return capacity_; }
  size_t used_bytes() const { return used_; }  // headers and wrap waste included
  uint64_t records() const { return count_; }
  uint64_t oldest_ns() const;  // 0 when empty
  uint64_t newest_ns() const { return count_ ? newest_ns_ : 0; }
  uint64_t dropped_for_room() const { return dropped_for_room_; }  // the budget was full
  uint64_t dropped_for_age() const { return dropped_for_age_; }    // older than the span
  uint64_t too_large() const { return too_large_; }                // larger than the whole ring

 private:
  struct Header {
    uint32_t size;  // the record's bytes; kWrap: the rest of the buffer is unused
    uint32_t unused;
    uint64_t time_ns;
  };
  static constexpr uint32_t kWrap = UINT32_MAX;
  static size_t Footprint(size_t size) { return sizeof(Header) + ((size + 7) & ~size_t{7}); }
  // Where the record at `at` really starts (past a wrap), and its header.
  size_t Resolve(size_t at) const;
  const Header& HeaderAt(size_t at) const { return *reinterpret_cast<const Header*>(buffer_ + at); }
  void DropOldest();

  size_t capacity_;
  uint8_t* buffer_;
  size_t head_ = 0;  // the oldest record (or a wrap before it)
  size_t tail_ = 0;  // where the next record goes
  size_t used_ = 0;
  uint64_t count_ = 0;
  uint64_t newest_ns_ = 0;
  uint64_t dropped_for_room_ = 0, dropped_for_age_ = 0, too_large_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_COLLECT_FLIGHT_RING_H
