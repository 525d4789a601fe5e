// Reading code objects out of a process; see the header.
#include "userspace/probe_sets/python/code_objects.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "userspace/base/remote_memory.h"
#include "userspace/probe_sets/python/line_table.h"

namespace torchprobe {
namespace {

constexpr uint64_t kMaxString = 4096;      // characters of a file or function name
constexpr uint64_t kMaxLineTable = 1 << 20;  // bytes of a line table

template <class T>
T At(const std::vector<char>& bytes, uint32_t offset) {
  T value{};
  if (offset + sizeof(T) <= bytes.size()) std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

void AppendUtf8(uint32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
}

}  // namespace

bool CodeObjects::ReadString(uint64_t address, std::string* out) const {
  const PythonObjectLayout& o = runtime_.objects;
  // The ASCII header alone first: a short string may end within a
  // PyCompactUnicodeObject's size of the end of its mapping.
  std::vector<char> head(o.ascii_size);
  if (!address || !ReadRemote(pid_, address, head.data(), head.size())) return false;
  uint32_t state = At<uint32_t>(head, o.unicode_state);
  uint64_t length = At<uint64_t>(head, o.unicode_length);
  unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact || length > kMaxString || (kind != 1 && kind != 2 && kind != 4)) return false;
  std::vector<char> data(length * kind);
  if (length && !ReadRemote(pid_, address + (ascii ? o.ascii_size : o.compact_size), data.data(), data.size()))
    return false;
  out->clear();
  if (ascii) {
    out->assign(data.begin(), data.end());
    return true;
  }
  for (uint64_t i = 0; i < length; ++i) {
    uint32_t c = 0;
    std::memcpy(&c, data.data() + i * kind, kind);  // little-endian: the low bytes
    AppendUtf8(c, out);
  }
  return true;
}

bool CodeObjects::ReadBytes(uint64_t address, std::string* out) const {
  const PythonObjectLayout& o = runtime_.objects;
  uint64_t size = 0, type = 0;
  if (!address || !ReadRemote(pid_, address + o.ob_type, &type, sizeof type) || type != runtime_.bytes_type ||
      !ReadRemote(pid_, address + o.bytes_size, &size, sizeof size) || size > kMaxLineTable)
    return false;
  out->resize(size);
  return size == 0 || ReadRemote(pid_, address + o.bytes_data, out->data(), size);
}

CodeObjects::Entry CodeObjects::Read(uint64_t address) const {
  const PythonObjectLayout& o = runtime_.objects;
  Entry entry;
  uint32_t size = 8 + std::max({o.ob_type, o.code_filename, o.code_qualname, o.code_linetable, o.code_firstlineno});
  std::vector<char> code(size);
  if (!ReadRemote(pid_, address, code.data(), code.size()) || At<uint64_t>(code, o.ob_type) != runtime_.code_type)
    return entry;
  auto made = std::make_shared<PythonCode>();
  made->first_line = At<int32_t>(code, o.code_firstlineno);
  if (!ReadString(At<uint64_t>(code, o.code_filename), &made->file) ||
      !ReadString(At<uint64_t>(code, o.code_qualname), &made->function))
    return entry;
  // A line table that does not read as one leaves the frame's lines
  // unknown (-1), not the frame: on 3.13 the script's own <module> code
  // was seen, in some runs, with co_linetable pointing at freed memory.
  if (!ReadBytes(At<uint64_t>(code, o.code_linetable), &entry.linetable)) entry.linetable.clear();
  entry.code = std::move(made);
  return entry;
}

bool CodeObjects::Frame(uint64_t address, int32_t lasti, PythonFrame* frame) {
  auto it = cache_.find(address);
  if (it == cache_.end()) it = cache_.emplace(address, Read(address)).first;
  const Entry& entry = it->second;
  if (!entry.code) return false;
  frame->code = entry.code;
  frame->line = PythonLine(entry.linetable, entry.code->first_line, lasti);
  return true;
}

}  // namespace torchprobe
