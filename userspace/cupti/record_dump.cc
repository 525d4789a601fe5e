// The received records as golden-stream text; see the header.
#include "userspace/cupti/record_dump.h"

#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "userspace/cupti/record_stream.h"

namespace torchprobe {

namespace {

template <typename T>
bool Take(const uint8_t* record, size_t size, T* out) {
  if (size < sizeof(T)) return false;
  std::memcpy(out, record, sizeof(T));
  return true;
}

void PutActivity(std::FILE* f, const tpc_activity& a) {
  std::fprintf(f, " start=%" PRIu64 " end=%" PRIu64 " corr=%u device=%u context=%u stream=%u graph=%u", a.start_ns,
               a.end_ns, a.correlation, a.device, a.context, a.stream, a.graph_id);
}

}  // namespace

RecordDump::RecordDump() {
  const char* path = std::getenv("TORCHPROBE_CUPTI_DUMP");
  if (!path || !*path) return;
  file_ = std::fopen(path, "w");
  if (!file_) std::fprintf(stderr, "torchprobe: TORCHPROBE_CUPTI_DUMP: cannot write %s: %s\n", path, strerror(errno));
  else std::fprintf(file_, "# the CUPTI records torchprobe received (userspace/cupti/record_dump.h)\n");
}

RecordDump::~RecordDump() {
  if (file_) std::fclose(file_);
}

void RecordDump::Write(uint32_t pid, const uint8_t* record, size_t size) {
  if (!file_) return;
  tpc_header hdr;
  if (!Take(record, size, &hdr)) return;
  std::FILE* f = file_;
  switch (hdr.type) {
    case TPC_HELLO: {
      tpc_hello r;
      if (!Take(record, size, &r)) return;
      if (r.clock == TPC_CLOCK_MONOTONIC) std::fprintf(f, "hello   %u clock=monotonic\n", pid);
      else std::fprintf(f, "hello   %u clock=offset offset=%" PRId64 "\n", pid, r.clock_offset_ns);
      return;
    }
    case TPC_API: {
      tpc_api r;
      if (!Take(record, size, &r)) return;
      std::fprintf(f, "api     %u tid=%u start=%" PRIu64 " end=%" PRIu64 " corr=%u domain=%s cbid=%u\n", pid, r.tid,
                   r.start_ns, r.end_ns, r.correlation, r.domain == TPC_API_DRIVER ? "driver" : "runtime", r.cbid);
      return;
    }
    case TPC_KERNEL: {
      tpc_kernel r;
      if (!Take(record, size, &r) || sizeof(r) + r.name_len > size) return;
      std::fprintf(f, "kernel  %u", pid);
      PutActivity(f, r.a);
      std::fprintf(f, " grid=%d,%d,%d block=%d,%d,%d name=%.*s\n", r.grid[0], r.grid[1], r.grid[2], r.block[0],
                   r.block[1], r.block[2], static_cast<int>(r.name_len),
                   reinterpret_cast<const char*>(record + sizeof(r)));
      return;
    }
    case TPC_MEMCPY: {
      tpc_memcpy r;
      if (!Take(record, size, &r)) return;
      std::fprintf(f, "memcpy  %u", pid);
      PutActivity(f, r.a);
      std::fprintf(f, " bytes=%" PRIu64 " copy=%u src=%u dst=%u\n", r.bytes, r.copy_kind, r.src_kind, r.dst_kind);
      return;
    }
    case TPC_MEMSET: {
      tpc_memset r;
      if (!Take(record, size, &r)) return;
      std::fprintf(f, "memset  %u", pid);
      PutActivity(f, r.a);
      std::fprintf(f, " bytes=%" PRIu64 "\n", r.bytes);
      return;
    }
    case TPC_DROPS: {
      tpc_drops r;
      if (!Take(record, size, &r)) return;
      std::fprintf(f, "drops   %u sent=%" PRIu64 " dropped=%" PRIu64 " cupti=%" PRIu64 "\n", pid, r.records_sent,
                   r.records_dropped, r.cupti_dropped);
      return;
    }
    default:  // syncs and notes: not part of the golden text
      std::fprintf(f, "# record type %u, %zu bytes\n", hdr.type, size);
  }
}

}  // namespace torchprobe
