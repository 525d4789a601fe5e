// Reading the collectors' record stream; see the header.
#include "userspace/cupti/record_receiver.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "userspace/clock.h"
#include "userspace/cupti/record_stream.h"
#include "userspace/discover/address_symbols.h"

namespace torchprobe {

namespace {

constexpr int kReceiveBufferBytes = 16 << 20;  // ~200 k records between two polls

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

CuptiReceiver::~CuptiReceiver() {
  stop_ = true;
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) close(fd_);
}

void CuptiReceiver::ReadLoop() {
  constexpr int kWakeMs = 50;  // how soon the thread sees stop_
  std::vector<uint8_t> buf(TPC_MAX_DATAGRAM);
  while (!stop_.load()) {
    pollfd pfd{fd_, POLLIN, 0};
    if (poll(&pfd, 1, kWakeMs) <= 0) continue;
    for (;;) {
      ssize_t n = recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
      if (n < 0) break;
      last_datagram_ns_ = NowNs();
      std::lock_guard<std::mutex> lock(inbox_mutex_);
      inbox_.emplace_back(buf.begin(), buf.begin() + n);
    }
  }
}

Status CuptiReceiver::Listen() {
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return Status::Error(std::string("cannot make the CUPTI socket: ") + strerror(errno));
  int bytes = kReceiveBufferBytes;
  if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  // Abstract: "@name" to the collector, a leading NUL in the address.
  std::string name = "torchprobe-cupti-" + std::to_string(getpid()) + "-" + std::to_string(NowNs());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0)
    return Status::Error("cannot bind the CUPTI socket @" + name + ": " + strerror(errno));
  address_ = "@" + name;
  reader_ = std::thread([this] { ReadLoop(); });
  return Status::Ok();
}

void CuptiReceiver::ExportEnvironment(const std::string& collector_path) const {
  setenv("CUDA_INJECTION64_PATH", collector_path.c_str(), 1);
  setenv(TPC_SOCKET_ENV, address_.c_str(), 1);
}

void CuptiReceiver::Poll() {
  std::vector<std::vector<uint8_t>> taken;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    taken.swap(inbox_);
  }
  for (const auto& datagram : taken) Feed(datagram.data(), datagram.size());
}

void CuptiReceiver::Drain(uint64_t quiet_ns, uint64_t max_ns) {
  Poll();  // what is there already (a note from a collector that got no CUPTI)
  if (fd_ < 0 || clocks_.empty()) return;
  uint64_t start = NowNs();
  for (;;) {
    uint64_t now = NowNs(), last = std::max<uint64_t>(last_datagram_ns_.load(), start);
    if (now - last >= quiet_ns || now - start >= max_ns) break;
    usleep(5'000);
    Poll();
  }
  Poll();
}

void CuptiReceiver::Feed(const uint8_t* data, size_t size) {
  while (size >= sizeof(tpc_header)) {
    tpc_header hdr;
    std::memcpy(&hdr, data, sizeof(hdr));
    if (hdr.size < sizeof(hdr) || hdr.size > size) break;  // the rest cannot be framed
    dump_.Write(data, hdr.size);
    OnRecord(data, hdr.size);
    data += hdr.size;
    size -= hdr.size;
  }
  if (size > 0) ++unreadable_;
}

uint64_t CuptiReceiver::Time(uint32_t pid, uint64_t cupti_ns) const {
  auto it = clocks_.find(pid);
  return it == clocks_.end() ? cupti_ns : static_cast<uint64_t>(static_cast<int64_t>(cupti_ns) + it->second.offset_ns);
}

void CuptiReceiver::OnRecord(const uint8_t* record, size_t size) {
  tpc_header hdr;
  std::memcpy(&hdr, record, sizeof(hdr));
  auto fill = [&](const tpc_activity& a, GpuActivity* out) {
    out->pid = hdr.pid;
    out->start_ns = Time(hdr.pid, a.start_ns);
    out->end_ns = Time(hdr.pid, a.end_ns);
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
      clocks_[hdr.pid].offset_ns = hello.clock == TPC_CLOCK_CUPTI_OFFSET ? hello.clock_offset_ns : 0;
      return;
    }
    case TPC_KERNEL: {
      tpc_kernel k;
      if (!Read(record, size, &k) || sizeof(k) + k.name_len > size) break;
      GpuActivity a;
      a.kind = GpuActivity::kKernel;
      fill(k.a, &a);
      // CUPTI names kernels by their mangled symbol; Kineto shows them
      // demangled. A run launches a few hundred kernels many times over:
      // each is demangled once.
      std::string mangled(reinterpret_cast<const char*>(record + sizeof(k)), k.name_len);
      auto known = kernel_names_.find(mangled);
      if (known == kernel_names_.end()) known = kernel_names_.emplace(mangled, DemangleSymbol(mangled)).first;
      a.name = known->second;
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
      call.pid = hdr.pid;
      call.tid = api.tid;
      call.start_ns = Time(hdr.pid, api.start_ns);
      call.end_ns = Time(hdr.pid, api.end_ns);
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
      counts_[hdr.pid] = drops;
      return;
    }
    case TPC_NOTE: {
      std::string text(reinterpret_cast<const char*>(record + sizeof(hdr)), size - sizeof(hdr));
      if (notes_said_.insert(text).second && !quiet_)
        std::fprintf(stderr, "torchprobe: pid %u: %s\n", hdr.pid, text.c_str());
      return;
    }
  }
  ++unreadable_;
}

void CuptiReceiver::PutStats(TraceStats* stats) const {
  stats->gpu_processes = clocks_.size();
  stats->gpu_records_dropped = 0;
  stats->gpu_cupti_dropped = 0;
  for (const auto& [pid, counts] : counts_) {
    stats->gpu_records_dropped += counts.records_dropped;
    stats->gpu_cupti_dropped += counts.cupti_dropped;
  }
  stats->gpu_unreadable = unreadable_;
}

}  // namespace torchprobe
