// Just enough of PNG to check a screenshot in a test: 8-bit RGB or RGBA,
// not interlaced (what Chromium writes), inflated with zlib, every
// scanline filter undone.
#ifndef TORCHPROBE_TESTS_PNG_READER_H
#define TORCHPROBE_TESTS_PNG_READER_H

#include <cstdint>
#include <string>
#include <vector>

namespace torchprobe::test {

struct Image {
  uint32_t width = 0;
  uint32_t height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
};

// False with a one-line *error for anything else.
bool DecodePng(const std::string& bytes, Image* image, std::string* error);

}  // namespace torchprobe::test

#endif  // TORCHPROBE_TESTS_PNG_READER_H
