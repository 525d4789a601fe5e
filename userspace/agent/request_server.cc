#include "userspace/agent/request_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace torchprobe {
namespace {

constexpr uint64_t kAcceptPauseNs = 1'000'000'000;

}  // namespace

RequestServer::~RequestServer() {
  for (auto& [fd, client] : clients_) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void RequestServer::Adopt(int listen_fd) {
  listen_fd_ = listen_fd;
  fcntl(listen_fd_, F_SETFL, fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
}

size_t RequestServer::reading() const {
  return static_cast<size_t>(
      std::count_if(clients_.begin(), clients_.end(), [](const auto& c) { return c.second.state == State::kReading; }));
}

size_t RequestServer::held() const {
  return static_cast<size_t>(
      std::count_if(clients_.begin(), clients_.end(), [](const auto& c) { return c.second.state == State::kHeld; }));
}

void RequestServer::AddPollFds(uint64_t now_ns, std::vector<pollfd>* fds) {
  first_polled_ = fds->size();
  polled_.clear();
  if (listen_fd_ >= 0 && now_ns >= paused_until_ns_ && reading() < limits_.max_reading) {
    fds->push_back({listen_fd_, POLLIN, 0});
    polled_.push_back(-1);
  }
  for (const auto& [fd, client] : clients_) {
    if (client.state == State::kHeld) continue;
    fds->push_back({fd, static_cast<short>(client.state == State::kReading ? POLLIN : POLLOUT), 0});
    polled_.push_back(fd);
  }
}

uint64_t RequestServer::NextWakeNs() const {
  uint64_t next = paused_until_ns_ ? paused_until_ns_ : UINT64_MAX;
  for (const auto& [fd, client] : clients_)
    if (client.state != State::kHeld) next = std::min(next, client.deadline_ns);
  return next;
}

void RequestServer::Service(const std::vector<pollfd>& fds, uint64_t now_ns, std::vector<Request>* requests) {
  if (paused_until_ns_ && now_ns >= paused_until_ns_) paused_until_ns_ = 0;
  for (size_t i = 0; i < polled_.size() && first_polled_ + i < fds.size(); ++i) {
    const pollfd& polled = fds[first_polled_ + i];
    if (!polled.revents) continue;
    if (polled_[i] < 0) {
      Accept(now_ns);
      continue;
    }
    auto it = clients_.find(polled_[i]);
    if (it == clients_.end()) continue;
    if (it->second.state == State::kReading) {
      Read(it->first, &it->second, requests);
    } else if (it->second.state == State::kWriting && (Write(it->first, &it->second) || (polled.revents & (POLLERR | POLLHUP)))) {
      Close(it->first);
    }
  }
  // Whatever is past its deadline goes, whatever it was doing.
  std::vector<int> expired;
  for (const auto& [fd, client] : clients_)
    if (client.state != State::kHeld && now_ns >= client.deadline_ns) expired.push_back(fd);
  for (int fd : expired) {
    ++dropped_;
    Close(fd);
  }
}

void RequestServer::Accept(uint64_t now_ns) {
  while (reading() < limits_.max_reading) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Client& client = clients_[fd];
      client.deadline_ns = now_ns + limits_.deadline_ns;
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      ++accept_failures_;
      paused_until_ns_ = now_ns + kAcceptPauseNs;
    }
    return;  // EAGAIN: none left
  }
}

void RequestServer::Read(int fd, Client* client, std::vector<Request>* requests) {
  char buffer[4096];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) break;  // end of stream or an error: the request is what came
    client->in.append(buffer, static_cast<size_t>(n));
    if (client->in.size() > limits_.max_bytes) {
      ++dropped_;
      return Close(fd);
    }
    if (limits_.complete(client->in)) {
      client->state = State::kHeld;
      requests->push_back({fd, client->in});
      return;
    }
  }
  if (limits_.complete(client->in)) {
    client->state = State::kHeld;
    requests->push_back({fd, client->in});
  } else {
    Close(fd);  // gone before its request was whole
  }
}

bool RequestServer::Write(int fd, Client* client) {
  while (client->sent < client->out.size()) {
    ssize_t n = send(fd, client->out.data() + client->sent, client->out.size() - client->sent,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n <= 0) return true;  // the client is gone: nothing left to do
    client->sent += static_cast<size_t>(n);
  }
  return true;
}

void RequestServer::Answer(int client_fd, std::string text, uint64_t now_ns) {
  auto it = clients_.find(client_fd);
  if (it == clients_.end()) return;
  Client& client = it->second;
  client.state = State::kWriting;
  client.out = std::move(text);
  client.sent = 0;
  client.deadline_ns = now_ns + limits_.deadline_ns;
  if (Write(client_fd, &client)) Close(client_fd);
}

void RequestServer::Close(int fd) {
  close(fd);
  clients_.erase(fd);
}

}  // namespace torchprobe
