// The received records as golden-stream text; see the header.
#include "userspace/cupti/record_dump.h"

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "userspace/cupti/record_stream.h"

namespace torchprobe {

namespace {

template <typename T>
bool Take(const uint8_t* record, size_t size, T* out) {
  if (size < sizeof(T)) return false;
  std::memcpy(out, record, sizeof(T));
  return true;
}

// A kernel's name from the target, as one word of printable ASCII.
std::string OneWord(const uint8_t* name, size_t size) {
  std::string word;
  for (size_t i = 0; i < size; ++i) word += name[i] > 0x20 && name[i] < 0x7f ? static_cast<char>(name[i]) : '?';
  return word;
}

}  // namespace

RecordDump::RecordDump() {
  const char* path = std::getenv("TORCHPROBE_CUPTI_DUMP");
  if (!path || !*path) return;
  std::string error;
  file_ = AtomicFile::Open(path, &error);
  if (!file_) std::fprintf(stderr, "torchprobe: TORCHPROBE_CUPTI_DUMP: %s\n", error.c_str());
  else Line("# the CUPTI records torchprobe received (userspace/cupti/record_dump.h)\n");
}

RecordDump::~RecordDump() {
  std::string error;
  if (file_ && !file_->Commit(&error)) std::fprintf(stderr, "torchprobe: TORCHPROBE_CUPTI_DUMP: %s\n", error.c_str());
}

void RecordDump::Line(const char* format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  int n = std::vsnprintf(line, sizeof(line), format, args);
  va_end(args);
  if (n > 0) file_->Write(line, std::min<size_t>(static_cast<size_t>(n), sizeof(line) - 1));
}

void RecordDump::PutActivity(const tpc_activity& a) {
  Line(" start=%" PRIu64 " end=%" PRIu64 " corr=%u device=%u context=%u stream=%u graph=%u", a.start_ns, a.end_ns,
       a.correlation, a.device, a.context, a.stream, a.graph_id);
}

void RecordDump::Write(uint32_t pid, const uint8_t* record, size_t size) {
  if (!file_) return;
  tpc_header hdr;
  if (!Take(record, size, &hdr)) return;
  switch (hdr.type) {
    case TPC_HELLO: {
      tpc_hello r;
      if (!Take(record, size, &r)) return;
      if (r.clock == TPC_CLOCK_MONOTONIC) Line("hello   %u clock=monotonic\n", pid);
      else Line("hello   %u clock=offset offset=%" PRId64 "\n", pid, r.clock_offset_ns);
      return;
    }
    case TPC_API: {
      tpc_api r;
      if (!Take(record, size, &r)) return;
      Line("api     %u tid=%u start=%" PRIu64 " end=%" PRIu64 " corr=%u domain=%s cbid=%u\n", pid, r.tid, r.start_ns,
           r.end_ns, r.correlation, r.domain == TPC_API_DRIVER ? "driver" : "runtime", r.cbid);
      return;
    }
    case TPC_KERNEL: {
      tpc_kernel r;
      if (!Take(record, size, &r) || sizeof(r) + r.name_len > size) return;
      Line("kernel  %u", pid);
      PutActivity(r.a);
      Line(" grid=%d,%d,%d block=%d,%d,%d name=", r.grid[0], r.grid[1], r.grid[2], r.block[0], r.block[1],
           r.block[2]);
      std::string name = OneWord(record + sizeof(r), r.name_len) + "\n";
      file_->Write(name.data(), name.size());
      return;
    }
    case TPC_MEMCPY: {
      tpc_memcpy r;
      if (!Take(record, size, &r)) return;
      Line("memcpy  %u", pid);
      PutActivity(r.a);
      Line(" bytes=%" PRIu64 " copy=%u src=%u dst=%u\n", r.bytes, r.copy_kind, r.src_kind, r.dst_kind);
      return;
    }
    case TPC_MEMSET: {
      tpc_memset r;
      if (!Take(record, size, &r)) return;
      Line("memset  %u", pid);
      PutActivity(r.a);
      Line(" bytes=%" PRIu64 "\n", r.bytes);
      return;
    }
    case TPC_DROPS: {
      tpc_drops r;
      if (!Take(record, size, &r)) return;
      Line("drops   %u sent=%" PRIu64 " dropped=%" PRIu64 " cupti=%" PRIu64 "\n", pid, r.records_sent,
           r.records_dropped, r.cupti_dropped);
      return;
    }
    default:  // syncs and notes: not part of the golden text
      Line("# record type %u, %zu bytes\n", hdr.type, size);
  }
}

}  // namespace torchprobe
