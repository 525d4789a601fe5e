// Reading the collectors' record stream; see the header.
#include "userspace/cupti/record_receiver.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "userspace/base/clock.h"
#include "userspace/base/demangle.h"
#include "userspace/cupti/record_stream.h"

namespace torchprobe {

// The bounds (ReceiverBounds), and why:
// - kept_bytes, 64 MiB: the collector's own send queue (collector.cc), so
//   one collector's whole backlog fits while the session's loop is busy
//   elsewhere (writing a window's files); past it records are counted.
// - held_bytes, 16 MiB: the socket's own receive buffer. A process the
//   session has not named yet sends its hello and at most a flush (100 ms
//   of records) before the next turn of the loop names it; what others
//   send is refused at that turn.
// - notes, 32: a collector says one or two things (no CUPTI, another
//   subscriber, another CUPTI version); past 32 distinct ones they are
//   counted, not said.
// - kernel_names, 4096: a model launches a few hundred distinct kernels
//   (compiled ones a few thousand); past it a name is demangled at each
//   launch, nothing is lost.
namespace {

// What of a note is said: one terminal line.
constexpr size_t kNoteChars = 240;

const char* CopyKindName(uint8_t kind) {
  switch (kind) {  // CUpti_ActivityMemcpyKind, as Kineto names them
    case 1: return "HtoD";
    case 2: return "DtoH";
    case 3: return "HtoA";
    case 4: return "AtoH";
    case 5: return "AtoA";
    case 6: return "AtoD";
    case 7: return "DtoA";
    case 8: return "DtoD";
    case 9: return "HtoH";
    case 10: return "PtoP";
  }
  return "Unknown";
}

const char* MemoryKindName(uint8_t kind) {
  switch (kind) {  // CUpti_ActivityMemoryKind
    case 1: return "Pageable";
    case 2: return "Pinned";
    case 3: return "Device";
    case 4: return "Array";
    case 5: return "Managed";
    case 6: return "Device Static";
    case 7: return "Managed Static";
  }
  return "Unknown";
}

template <typename T>
bool Read(const uint8_t* record, size_t size, T* out) {
  if (size < sizeof(T)) return false;
  std::memcpy(out, record, sizeof(T));
  return true;
}

}  // namespace

std::string CollectorPath() {
  std::vector<char> buf(4096);
  ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return "libtorchprobe_cupti.so";
  std::string exe(buf.data(), static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/') + 1) + "libtorchprobe_cupti.so";
}

void CuptiReceiver::ExportEnvironment(const std::string& collector_path) const {
  setenv("CUDA_INJECTION64_PATH", collector_path.c_str(), 1);
  setenv(TPC_SOCKET_ENV, address().c_str(), 1);
}

void CuptiReceiver::Poll(uint64_t known_ns) {
  known_ns_ = std::max(known_ns_, known_ns);
  for (const Datagram& datagram : inbox_.Take(known_ns_))
    Feed(datagram.bytes.data(), datagram.bytes.size(), datagram.sender);
}

void CuptiReceiver::Drain(uint64_t quiet_ns, uint64_t max_ns) {
  inbox_.ReadWaiting();  // what was sent by now, whatever the thread is doing
  Poll(known_ns_);       // what is there already (a note from a collector that got no CUPTI)
  if (!clocks_.empty()) {
    uint64_t start = NowNs();
    for (;;) {
      uint64_t now = NowNs(), last = std::max<uint64_t>(inbox_.last_kept_ns(), start);
      if (now - last >= quiet_ns || now - start >= max_ns) break;
      usleep(5'000);
      Poll(known_ns_);
    }
    Poll(known_ns_);
  }
  inbox_.RefuseHeld();
}

void CuptiReceiver::Feed(const uint8_t* data, size_t size, uint32_t sender) {
  while (size >= sizeof(tpc_header)) {
    tpc_header hdr;
    std::memcpy(&hdr, data, sizeof(hdr));
    if (hdr.size < sizeof(hdr) || hdr.size > size) break;  // the rest cannot be framed
    uint32_t pid = sender ? sender : hdr.pid;
    dump_.Write(pid, data, hdr.size);
    OnRecord(pid, data, hdr.size);
    data += hdr.size;
    size -= hdr.size;
  }
  if (size > 0) ++unreadable_;
}

uint64_t CuptiReceiver::Time(uint32_t pid, uint64_t cupti_ns) const {
  auto it = clocks_.find(pid);
  return it == clocks_.end() ? cupti_ns : static_cast<uint64_t>(static_cast<int64_t>(cupti_ns) + it->second.offset_ns);
}

const std::string& CuptiReceiver::KernelName(const std::string& mangled) {
  // CUPTI names kernels by their mangled symbol; Kineto shows them
  // demangled. A run launches a few hundred kernels many times over: each
  // is demangled once.
  auto known = kernel_names_.find(mangled);
  if (known != kernel_names_.end()) return known->second;
  if (kernel_names_.size() >= bounds_.kernel_names) return kernel_name_ = DemangleSymbol(mangled);
  return kernel_names_.emplace(mangled, DemangleSymbol(mangled)).first->second;
}

void CuptiReceiver::SayNote(uint32_t pid, const uint8_t* text, size_t size) {
  // The target's text, for root's terminal: printable ASCII on one line
  // (no escape sequence, no line of its own), cut.
  std::string note;
  for (size_t i = 0; i < size && note.size() < kNoteChars; ++i)
    note += text[i] >= 0x20 && text[i] < 0x7f ? static_cast<char>(text[i]) : '?';
  if (size > kNoteChars) note += "...";
  if (notes_said_.count(note)) return;
  if (notes_said_.size() >= bounds_.notes) {
    ++notes_over_bound_;
    return;
  }
  notes_said_.insert(note);
  if (!quiet_) std::fprintf(stderr, "torchprobe: pid %u: %s\n", pid, note.c_str());
}

void CuptiReceiver::OnRecord(uint32_t pid, const uint8_t* record, size_t size) {
  tpc_header hdr;
  std::memcpy(&hdr, record, sizeof(hdr));
  auto fill = [&](const tpc_activity& a, GpuActivity* out) {
    out->pid = pid;
    out->start_ns = Time(pid, a.start_ns);
    out->end_ns = Time(pid, a.end_ns);
    out->device = a.device;
    out->context = a.context;
    out->stream = a.stream;
    out->graph_id = a.graph_id;
    out->cupti_correlation = a.correlation;
  };
  switch (hdr.type) {
    case TPC_HELLO: {
      tpc_hello hello;
      if (!Read(record, size, &hello)) break;
      clocks_[pid].offset_ns = hello.clock == TPC_CLOCK_CUPTI_OFFSET ? hello.clock_offset_ns : 0;
      return;
    }
    case TPC_KERNEL: {
      tpc_kernel k;
      if (!Read(record, size, &k) || sizeof(k) + k.name_len > size) break;
      GpuActivity a;
      a.kind = GpuActivity::kKernel;
      fill(k.a, &a);
      a.name = KernelName(std::string(reinterpret_cast<const char*>(record + sizeof(k)), k.name_len));
      for (int i = 0; i < 3; ++i) a.grid[i] = k.grid[i], a.block[i] = k.block[i];
      a.shared_bytes = k.shared_bytes;
      a.registers = k.registers;
      join_->OnActivity(std::move(a));
      return;
    }
    case TPC_MEMCPY: {
      tpc_memcpy m;
      if (!Read(record, size, &m)) break;
      GpuActivity a;
      a.kind = GpuActivity::kMemcpy;
      fill(m.a, &a);
      a.bytes = m.bytes;
      a.name = std::string("Memcpy ") + CopyKindName(m.copy_kind) + " (" + MemoryKindName(m.src_kind) + " -> " +
               MemoryKindName(m.dst_kind) + ")";
      join_->OnActivity(std::move(a));
      return;
    }
    case TPC_MEMSET: {
      tpc_memset m;
      if (!Read(record, size, &m)) break;
      GpuActivity a;
      a.kind = GpuActivity::kMemset;
      fill(m.a, &a);
      a.bytes = m.bytes;
      a.name = "Memset (Device)";
      join_->OnActivity(std::move(a));
      return;
    }
    case TPC_API: {
      tpc_api api;
      if (!Read(record, size, &api)) break;
      GpuApiCall call;
      call.pid = pid;
      call.tid = api.tid;
      call.start_ns = Time(pid, api.start_ns);
      call.end_ns = Time(pid, api.end_ns);
      call.correlation = api.correlation;
      join_->OnApiCall(call);
      return;
    }
    case TPC_SYNC:  // read, not shown yet: our own probes' sync slices are
      return;
    case TPC_DROPS: {
      tpc_drops drops;
      if (!Read(record, size, &drops)) break;
      // Cumulative, sent while the counts move and at exit: the last holds.
      counts_[pid] = drops;
      return;
    }
    case TPC_NOTE:
      SayNote(pid, record + sizeof(hdr), size - sizeof(hdr));
      return;
  }
  ++unreadable_;
}

void CuptiReceiver::PutStats(TraceStats* stats) {
  stats->gpu_processes = clocks_.size();
  stats->gpu_records_dropped = 0;
  stats->gpu_cupti_dropped = 0;
  for (const auto& [pid, counts] : counts_) {
    stats->gpu_records_dropped += counts.records_dropped;
    stats->gpu_cupti_dropped += counts.cupti_dropped;
  }
  stats->gpu_unreadable = unreadable_;
  DatagramInbox::Counts now = inbox_.counts();
  stats->gpu_refused_datagrams += now.refused - reported_.refused;
  stats->gpu_queue_full += now.over_bound - reported_.over_bound + notes_over_bound_ - notes_reported_;
  reported_ = now;
  notes_reported_ = notes_over_bound_;
}

}  // namespace torchprobe
