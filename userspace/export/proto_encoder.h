// A small protobuf wire-format encoder: appends fields to one growable byte
// buffer. Nested messages reserve one length byte and are fixed up when they
// end (the body moves only in the rare case it grew past 127 bytes), so
// encoding a field never allocates once the buffer has warmed up.
#ifndef TORCHPROBE_EXPORT_PROTO_ENCODER_H
#define TORCHPROBE_EXPORT_PROTO_ENCODER_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace torchprobe {

class ProtoEncoder {
 public:
  ProtoEncoder() = default;
  ~ProtoEncoder();
  ProtoEncoder(const ProtoEncoder&) = delete;
  ProtoEncoder& operator=(const ProtoEncoder&) = delete;

  // Wire type 0. Negative int32/int64 values are written as 10-byte varints,
  // as protobuf does for int32/int64 fields.
  void Varint(uint32_t field, uint64_t value) {
    Reserve(20);
    PutVarint(MakeTag(field, kVarint));
    PutVarint(value);
  }
  void Bool(uint32_t field, bool value) { Varint(field, value ? 1 : 0); }
  // Wire type 1.
  void Fixed64(uint32_t field, uint64_t value) {
    Reserve(18);
    PutVarint(MakeTag(field, kFixed64));
    std::memcpy(pos_, &value, 8);  // little-endian host (x86-64, arm64)
    pos_ += 8;
  }
  void Double(uint32_t field, double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, 8);
    Fixed64(field, bits);
  }
  // Wire type 2 with a known payload.
  void Bytes(uint32_t field, const void* data, size_t size) {
    Reserve(20 + size);
    PutVarint(MakeTag(field, kLengthDelimited));
    PutVarint(size);
    if (size) std::memcpy(pos_, data, size);
    pos_ += size;
  }
  void String(uint32_t field, std::string_view s) { Bytes(field, s.data(), s.size()); }

  // Wire type 2 around fields written in between: returns a token for
  // EndNested. Nesting is allowed; end them innermost first.
  size_t BeginNested(uint32_t field) {
    Reserve(11);
    PutVarint(MakeTag(field, kLengthDelimited));
    *pos_++ = 0;  // length placeholder, fixed up in EndNested
    return static_cast<size_t>(pos_ - begin_);
  }
  void EndNested(size_t token) {
    size_t size = static_cast<size_t>(pos_ - begin_) - token;
    if (size < 0x80) {
      begin_[token - 1] = static_cast<uint8_t>(size);
    } else {
      FixLongLength(token, size);
    }
  }

  const uint8_t* data() const { return begin_; }
  size_t size() const { return static_cast<size_t>(pos_ - begin_); }
  void Clear() { pos_ = begin_; }
  // Makes room for n more bytes.
  void Reserve(size_t n) {
    if (static_cast<size_t>(end_ - pos_) < n) Grow(n);
  }

  static constexpr size_t VarintSize(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
      v >>= 7;
      ++n;
    }
    return n;
  }

 private:
  enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2 };
  static constexpr uint64_t MakeTag(uint32_t field, WireType type) {
    return (static_cast<uint64_t>(field) << 3) | type;
  }
  void PutVarint(uint64_t v) {
    while (v >= 0x80) {
      *pos_++ = static_cast<uint8_t>(v | 0x80);
      v >>= 7;
    }
    *pos_++ = static_cast<uint8_t>(v);
  }
  void Grow(size_t n);
  void FixLongLength(size_t token, size_t size);

  uint8_t* begin_ = nullptr;
  uint8_t* pos_ = nullptr;
  uint8_t* end_ = nullptr;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_PROTO_ENCODER_H
