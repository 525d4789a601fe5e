// See the header.
#include "tests/png_reader.h"

#include <zlib.h>

#include <cstdlib>
#include <cstring>

namespace torchprobe::test {
namespace {

uint32_t Be32(const std::string& s, size_t at) {
  return (uint32_t{static_cast<uint8_t>(s[at])} << 24) | (uint32_t{static_cast<uint8_t>(s[at + 1])} << 16) |
         (uint32_t{static_cast<uint8_t>(s[at + 2])} << 8) | uint32_t{static_cast<uint8_t>(s[at + 3])};
}

uint8_t Paeth(int a, int b, int c) {
  int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return static_cast<uint8_t>(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

}  // namespace

bool DecodePng(const std::string& bytes, Image* image, std::string* error) {
  static const char kSignature[] = "\x89PNG\r\n\x1a\n";
  if (bytes.size() < 8 || bytes.compare(0, 8, kSignature, 8) != 0) {
    *error = "not a PNG";
    return false;
  }
  std::string idat;
  uint32_t channels = 0;
  for (size_t at = 8; at + 8 <= bytes.size();) {
    uint32_t length = Be32(bytes, at);
    std::string type = bytes.substr(at + 4, 4);
    if (at + 12 + length > bytes.size()) {
      *error = "PNG chunk " + type + " cut short";
      return false;
    }
    if (type == "IHDR") {
      image->width = Be32(bytes, at + 8);
      image->height = Be32(bytes, at + 12);
      uint8_t depth = static_cast<uint8_t>(bytes[at + 16]), color = static_cast<uint8_t>(bytes[at + 17]);
      uint8_t interlace = static_cast<uint8_t>(bytes[at + 20]);
      if (depth != 8 || (color != 2 && color != 6) || interlace != 0) {
        *error = "PNG not 8-bit RGB(A), non-interlaced";
        return false;
      }
      channels = color == 2 ? 3 : 4;
    } else if (type == "IDAT") {
      idat.append(bytes, at + 8, length);
    }
    at += 12 + length;
  }
  if (channels == 0 || image->width == 0 || image->height == 0) {
    *error = "PNG without a header";
    return false;
  }
  size_t stride = size_t{image->width} * channels;
  std::vector<uint8_t> raw((stride + 1) * image->height);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_size != raw.size()) {
    *error = "PNG data does not inflate to its size";
    return false;
  }
  std::vector<uint8_t> prev(stride, 0), line(stride);
  image->rgb.resize(size_t{image->width} * image->height * 3);
  for (uint32_t row = 0; row < image->height; ++row) {
    const uint8_t* in = &raw[row * (stride + 1)];
    uint8_t filter = in[0];
    for (size_t i = 0; i < stride; ++i) {
      int a = i >= channels ? line[i - channels] : 0, b = prev[i], c = i >= channels ? prev[i - channels] : 0;
      int x = in[1 + i];
      switch (filter) {
        case 1: x += a; break;
        case 2: x += b; break;
        case 3: x += (a + b) / 2; break;
        case 4: x += Paeth(a, b, c); break;
        default: break;
      }
      line[i] = static_cast<uint8_t>(x);
    }
    for (uint32_t col = 0; col < image->width; ++col)
      std::memcpy(&image->rgb[(size_t{row} * image->width + col) * 3], &line[col * channels], 3);
    prev.swap(line);
  }
  return true;
}

}  // namespace torchprobe::test
