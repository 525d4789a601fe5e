// The golden CUPTI streams in tests/golden/ are text, one record a line
// (readable in a review, editable by hand); this turns them into the binary
// record stream the collector sends (userspace/cupti/record_stream.h) and
// into the CPU side they go with.
#ifndef TORCHPROBE_TESTS_CUPTI_STREAM_TEXT_H
#define TORCHPROBE_TESTS_CUPTI_STREAM_TEXT_H

#include <cstdint>
#include <string>
#include <vector>

namespace torchprobe::test {

// A `slice` or `call` line: what our probes saw on the CPU.
struct CpuLine {
  bool call = false;  // a CUDA call (its entry goes to the GPU join)
  uint32_t pid = 0, tid = 0;
  uint64_t begin_ns = 0, end_ns = 0;
  uint16_t depth = 0;
  std::string name;
};

struct GoldenStream {
  std::vector<CpuLine> cpu;
  std::vector<uint8_t> records;  // the other lines, encoded back to back
};

// Parses `text`; false and *error naming the line when a line is malformed.
bool ParseGoldenStream(const std::string& text, GoldenStream* out, std::string* error);

}  // namespace torchprobe::test

#endif  // TORCHPROBE_TESTS_CUPTI_STREAM_TEXT_H
