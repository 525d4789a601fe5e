// The flight recorder's ring keeps exactly the newest records that fit,
// drops and counts the oldest, and never exceeds its budget.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "userspace/collect/flight_ring.h"

namespace torchprobe {
namespace {

std::vector<std::string> Kept(const FlightRing& ring) {
  std::vector<std::string> kept;
  ring.ForEach([&](const void* record, size_t size) { kept.emplace_back(static_cast<const char*>(record), size); });
  return kept;
}

// A record that says which it is: its number, then filler to `size`.
std::string Record(uint64_t number, size_t size) {
  std::string record(size, static_cast<char>('a' + number % 26));
  std::memcpy(record.data(), &number, std::min(size, sizeof number));
  return record;
}

TEST(FlightRingTest, KeepsTheNewestSuffixWithinItsBudget) {
  std::mt19937 random(7);
  for (size_t capacity : {size_t{64}, size_t{1000}, size_t{4096}, size_t{65536}}) {
    FlightRing ring(capacity);
    std::vector<std::string> pushed;
    for (uint64_t i = 0; i < 5000; ++i) {
      size_t size = 8 + random() % 120;
      std::string record = Record(i, size);
      uint64_t too_large = ring.too_large();
      ring.Push(record.data(), size, i);
      if (16 + (size + 7) / 8 * 8 > ring.capacity()) {  // never kept, and nothing else lost for it
        ASSERT_EQ(ring.too_large(), too_large + 1);
        continue;
      }
      pushed.push_back(record);
      ASSERT_LE(ring.used_bytes(), ring.capacity());
      std::vector<std::string> kept = Kept(ring);
      ASSERT_EQ(kept.size(), ring.records());
      // The kept records are the last ones pushed, in order, none skipped.
      size_t first = pushed.size() - kept.size();
      for (size_t k = 0; k < kept.size(); ++k) ASSERT_EQ(kept[k], pushed[first + k]) << "capacity " << capacity;
      ASSERT_GE(kept.size(), 1u) << "the newest is always kept";
      ASSERT_EQ(ring.dropped_for_room() + kept.size(), pushed.size());
      ASSERT_EQ(ring.newest_ns(), i);
    }
    if (capacity >= 4096) {
      EXPECT_GT(ring.records(), 20u) << "a ring that uses its room";
    }
  }
}

TEST(FlightRingTest, DropsByAgeOldestFirstAndCountsApart) {
  FlightRing ring(1 << 16);
  for (uint64_t t = 0; t < 100; ++t) ring.Push(Record(t, 24).data(), 24, t * 10);
  ring.DropBefore(500);
  EXPECT_EQ(ring.records(), 50u);
  EXPECT_EQ(ring.oldest_ns(), 500u);
  EXPECT_EQ(ring.dropped_for_age(), 50u);
  EXPECT_EQ(ring.dropped_for_room(), 0u);
  ring.DropBefore(10'000);
  EXPECT_EQ(ring.records(), 0u);
  EXPECT_EQ(ring.used_bytes(), 0u);
  EXPECT_EQ(ring.oldest_ns(), 0u);
  ring.Push(Record(1, 8).data(), 8, 7);
  EXPECT_EQ(Kept(ring), std::vector<std::string>{Record(1, 8)});
}

TEST(FlightRingTest, ARecordLargerThanTheRingIsCountedNotKept) {
  FlightRing ring(64);
  ring.Push(Record(1, 16).data(), 16, 1);
  std::string big(100, 'x');
  ring.Push(big.data(), big.size(), 2);
  EXPECT_EQ(ring.too_large(), 1u);
  EXPECT_EQ(Kept(ring), std::vector<std::string>{Record(1, 16)}) << "what was kept stays";
}

}  // namespace
}  // namespace torchprobe
