#include "userspace/agent/trigger_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace torchprobe {
namespace {

bool Address(const std::string& path, sockaddr_un* addr) {
  if (path.size() >= sizeof addr->sun_path) return false;
  *addr = {};
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

void SetTimeouts(int fd, double seconds) {
  timeval timeout = {static_cast<time_t>(seconds), static_cast<suseconds_t>((seconds - static_cast<long>(seconds)) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
}

// One line (without '\n'), at most 256 bytes; "" on timeout or EOF first.
std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (line.size() < 256) {
    ssize_t n = read(fd, &c, 1);
    if (n <= 0) return "";
    if (c == '\n') return line;
    line += c;
  }
  return "";
}

}  // namespace

TriggerServer::~TriggerServer() {
  if (fd_ >= 0) {
    close(fd_);
    unlink(path_.c_str());
  }
}

bool TriggerServer::Listen(const std::string& path, std::string* error) {
  sockaddr_un addr;
  if (!Address(path, &addr)) {
    *error = "socket path too long: " + path;
    return false;
  }
  int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    close(probe);
    *error = "another agent is running on " + path;
    return false;
  }
  if (probe >= 0) close(probe);
  unlink(path.c_str());  // a dead agent's
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  mode_t old = umask(077);
  bool bound = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  umask(old);
  if (!bound || listen(fd_, 16) != 0) {
    *error = "cannot listen on " + path + ": " + std::strerror(errno);
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return false;
  }
  path_ = path;
  return true;
}

int TriggerServer::Accept(TriggerRequest* request) {
  int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (client < 0) return -1;
  SetTimeouts(client, 1.0);
  std::istringstream line(ReadLine(client));
  std::string verb;
  long pid = 0;
  double seconds = 0;
  if (!(line >> verb >> pid >> seconds) || verb != "window" || pid <= 0 || !(seconds > 0) || seconds > 3600) {
    Reply(client, "error bad request: expected 'window PID SECONDS' (0 < SECONDS <= 3600)");
    return -1;
  }
  request->pid = static_cast<uint32_t>(pid);
  request->duration_s = seconds;
  return client;
}

void TriggerServer::Reply(int client, const std::string& line) {
  std::string text = line + "\n";
  ssize_t ignored = send(client, text.data(), text.size(), MSG_NOSIGNAL);
  (void)ignored;
  close(client);
}

std::string SendTrigger(const std::string& path, const TriggerRequest& request) {
  sockaddr_un addr;
  if (!Address(path, &addr)) return "error socket path too long: " + path;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    return "error no agent on " + path + ": " + why;
  }
  SetTimeouts(fd, request.duration_s + 120);
  char text[64];
  std::snprintf(text, sizeof text, "window %u %.3f\n", request.pid, request.duration_s);
  if (send(fd, text, std::strlen(text), MSG_NOSIGNAL) < 0) {
    close(fd);
    return std::string("error cannot send to the agent: ") + std::strerror(errno);
  }
  std::string answer = ReadLine(fd);
  close(fd);
  return answer.empty() ? "error the agent did not answer" : answer;
}

}  // namespace torchprobe
