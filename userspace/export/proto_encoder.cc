#include "userspace/export/proto_encoder.h"

#include <cstdlib>
#include <new>

namespace torchprobe {

ProtoEncoder::~ProtoEncoder() { std::free(begin_); }

void ProtoEncoder::Grow(size_t n) {
  size_t used = size();
  size_t capacity = static_cast<size_t>(end_ - begin_);
  size_t wanted = capacity ? capacity * 2 : 4096;
  while (wanted < used + n) wanted *= 2;
  auto* grown = static_cast<uint8_t*>(std::realloc(begin_, wanted));
  if (!grown) throw std::bad_alloc();
  begin_ = grown;
  pos_ = grown + used;
  end_ = grown + wanted;
}

// The body is longer than one length byte can say: shift it right to make
// room for the full varint.
void ProtoEncoder::FixLongLength(size_t token, size_t size) {
  size_t extra = VarintSize(size) - 1;
  Reserve(extra);
  uint8_t* body = begin_ + token;
  std::memmove(body + extra, body, size);
  pos_ += extra;
  uint8_t* out = body - 1;
  while (size >= 0x80) {
    *out++ = static_cast<uint8_t>(size | 0x80);
    size >>= 7;
  }
  *out = static_cast<uint8_t>(size);
}

}  // namespace torchprobe
