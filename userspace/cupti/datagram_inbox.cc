// Who sent each CUPTI datagram, and how much is held; see the header.
#include "userspace/cupti/datagram_inbox.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "userspace/base/clock.h"
#include "userspace/cupti/record_stream.h"

namespace torchprobe {

namespace {

constexpr int kReceiveBufferBytes = 16 << 20;  // ~200 k records between two reads
constexpr int kWakeMs = 50;                    // how soon the thread sees stop_
// Datagrams read per hold of the lock: a sender that never stops sending
// must not keep the session's poll loop out of Take.
constexpr size_t kReadBatch = 256;
// What ReadWaiting reads at most: about all the socket's buffer holds (each
// datagram costs the buffer ~512 bytes or more), so a flood cannot keep the
// session there.
constexpr size_t kReadWaitingMax = 1 << 15;
// What a datagram costs beyond its bytes (the vector, malloc's header).
constexpr size_t kDatagramOverhead = 64;

size_t Cost(const Datagram& d) { return d.bytes.size() + kDatagramOverhead; }

// Whole records in `bytes` (what a datagram left out held).
uint64_t CountRecords(const std::vector<uint8_t>& bytes) {
  uint64_t records = 0;
  for (size_t at = 0; at + sizeof(tpc_header) <= bytes.size(); ++records) {
    tpc_header hdr;
    std::memcpy(&hdr, bytes.data() + at, sizeof(hdr));
    if (hdr.size < sizeof(hdr)) break;
    at += hdr.size;
  }
  return records;
}

}  // namespace

DatagramInbox::~DatagramInbox() {
  stop_ = true;
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) close(fd_);
}

Status DatagramInbox::Listen() {
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return Status::Error(std::string("cannot make the CUPTI socket: ") + strerror(errno));
  int bytes = kReceiveBufferBytes;
  if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) != 0)
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  // Before bind: no datagram ever comes without its sender's credentials.
  int on = 1;
  if (setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0)
    return Status::Error(std::string("cannot ask for the CUPTI socket's credentials: ") + strerror(errno));
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

void DatagramInbox::ReadLoop() {
  while (!stop_.load()) {
    pollfd pfd{fd_, POLLIN, 0};
    if (poll(&pfd, 1, kWakeMs) <= 0) continue;
    ReadWaiting();
  }
}

void DatagramInbox::ReadWaiting() {
  if (fd_ < 0) return;
  std::vector<uint8_t> buf(TPC_MAX_DATAGRAM);
  // Room for the credentials only: descriptors a sender passes along
  // (SCM_RIGHTS) find none, and the kernel closes them.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  for (size_t read = 0; read < kReadWaitingMax;) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t batch = 0; batch < kReadBatch; ++batch, ++read) {
      iovec iov{buf.data(), buf.size()};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      ssize_t n = recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (n < 0) return;  // empty (or closed): nothing more now
      Datagram d;
      d.arrived_ns = NowNs();
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET) continue;
        if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
          ucred cred;
          std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
          // 0: a sender in a pid namespace that does not see ours.
          d.sender = cred.pid > 0 ? static_cast<uint32_t>(cred.pid) : 0;
        } else if (c->cmsg_type == SCM_RIGHTS) {  // never ours to keep
          size_t fds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
          for (size_t i = 0; i < fds; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
            close(fd);
          }
        }
      }
      d.bytes.assign(buf.begin(), buf.begin() + n);
      // Longer than any collector sends: not one.
      if (msg.msg_flags & MSG_TRUNC) d.sender = 0;
      KeepLocked(std::move(d));
    }
  }
}

void DatagramInbox::KeepLocked(Datagram d) {
  if (d.sender == 0) return RefuseLocked();
  if (accepted_.count(d.sender)) {
    if (kept_bytes_ + Cost(d) > kept_limit_) {
      counts_.over_bound += CountRecords(d.bytes);
      return;
    }
    last_kept_ns_ = d.arrived_ns;
    kept_bytes_ += Cost(d);
    kept_.push_back(std::move(d));
    return;
  }
  if (held_bytes_ + Cost(d) > held_limit_) return RefuseLocked();  // not named, no room to wait
  held_bytes_ += Cost(d);
  held_.push_back(std::move(d));
}

void DatagramInbox::RefuseLocked() { ++counts_.refused; }

void DatagramInbox::Accept(uint32_t pid, uint64_t since_ns) {
  if (pid == 0) return;
  ReadWaiting();  // what it sent so far was sent before it was named
  std::lock_guard<std::mutex> lock(mutex_);
  if (!accepted_.emplace(pid, since_ns).second) return;
  std::deque<Datagram> others;
  for (Datagram& d : held_) {
    if (d.sender != pid) {
      others.push_back(std::move(d));
      continue;
    }
    held_bytes_ -= Cost(d);
    if (d.arrived_ns < since_ns) RefuseLocked();
    else KeepLocked(std::move(d));
  }
  held_.swap(others);
}

void DatagramInbox::Forget(uint32_t pid) {
  ReadWaiting();  // it exited: whatever it sent is in the socket by now
  std::lock_guard<std::mutex> lock(mutex_);
  accepted_.erase(pid);
}

std::vector<Datagram> DatagramInbox::Take(uint64_t known_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!held_.empty() && held_.front().arrived_ns < known_ns) {
    held_bytes_ -= Cost(held_.front());
    RefuseLocked();
    held_.pop_front();
  }
  std::vector<Datagram> taken;
  taken.swap(kept_);
  kept_bytes_ = 0;
  return taken;
}

void DatagramInbox::RefuseHeld() {
  std::lock_guard<std::mutex> lock(mutex_);
  counts_.refused += held_.size();
  held_.clear();
  held_bytes_ = 0;
}

DatagramInbox::Counts DatagramInbox::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

}  // namespace torchprobe
