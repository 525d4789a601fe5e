// Protocol 2 opcodes (Lib/pickletools.py names them); see the header.
#include "userspace/export/pickle_writer.h"

#include "userspace/base/utf8.h"

namespace torchprobe {
namespace {

constexpr char kProto = '\x80', kStop = '.', kMark = '(', kEmptyDict = '}', kSetItems = 'u', kEmptyList = ']',
               kAppends = 'e', kTuple = 't', kBinUnicode = 'X', kBinInt = 'J', kLong1 = '\x8a', kNone = 'N',
               kTrue = '\x88', kFalse = '\x89';

void LittleEndian(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

PickleWriter::PickleWriter() {
  out_.push_back(kProto);
  out_.push_back('\x02');
}

PickleWriter& PickleWriter::Dict() {
  out_.push_back(kEmptyDict);
  out_.push_back(kMark);
  return *this;
}
PickleWriter& PickleWriter::EndDict() {
  out_.push_back(kSetItems);
  return *this;
}
PickleWriter& PickleWriter::List() {
  out_.push_back(kEmptyList);
  out_.push_back(kMark);
  return *this;
}
PickleWriter& PickleWriter::EndList() {
  out_.push_back(kAppends);
  return *this;
}
PickleWriter& PickleWriter::Tuple() {
  out_.push_back(kMark);
  return *this;
}
PickleWriter& PickleWriter::EndTuple() {
  out_.push_back(kTuple);
  return *this;
}

PickleWriter& PickleWriter::Str(std::string_view text) {
  std::string clean;
  clean.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t n = Utf8Length(text, i);
    if (n == 0) {
      clean.push_back('?');
      ++i;
    } else {
      clean.append(text.substr(i, n));
      i += n;
    }
  }
  out_.push_back(kBinUnicode);
  LittleEndian(&out_, clean.size(), 4);
  out_ += clean;
  return *this;
}

PickleWriter& PickleWriter::Int(int64_t value) {
  if (value >= INT32_MIN && value <= INT32_MAX) {
    out_.push_back(kBinInt);
    LittleEndian(&out_, static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
  } else {
    out_.push_back(kLong1);  // two's complement, little-endian
    out_.push_back('\x08');
    LittleEndian(&out_, static_cast<uint64_t>(value), 8);
  }
  return *this;
}

PickleWriter& PickleWriter::UInt(uint64_t value) {
  if (value <= static_cast<uint64_t>(INT64_MAX)) return Int(static_cast<int64_t>(value));
  out_.push_back(kLong1);  // a ninth byte keeps the sign bit clear
  out_.push_back('\x09');
  LittleEndian(&out_, value, 8);
  out_.push_back('\0');
  return *this;
}

PickleWriter& PickleWriter::Bool(bool value) {
  out_.push_back(value ? kTrue : kFalse);
  return *this;
}

PickleWriter& PickleWriter::None() {
  out_.push_back(kNone);
  return *this;
}

std::string PickleWriter::Finish() {
  out_.push_back(kStop);
  return std::move(out_);
}

}  // namespace torchprobe
