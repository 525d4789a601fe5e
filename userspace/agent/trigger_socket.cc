#include "userspace/agent/trigger_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "userspace/agent/target_text.h"

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

bool ParseTriggerRequest(const std::string& text, TriggerRequest* request, std::string* why) {
  *why = "bad request: expected 'window PID SECONDS' (0 < PID <= " + std::to_string(kMaxPid) +
         ", 0 < SECONDS <= 3600)";
  std::string line = text.substr(0, text.find('\n'));
  constexpr std::string_view kDump = "dump ";
  if (line.starts_with(kDump)) {
    const char* begin = line.c_str() + kDump.size();
    const char* end = line.c_str() + line.size();
    uint64_t pid = 0;
    auto [after_pid, pid_error] = std::from_chars(begin, end, pid);
    if (pid_error != std::errc() || after_pid != end || pid == 0 || pid > kMaxPid) {
      *why = "bad request: expected 'dump PID' (0 < PID <= " + std::to_string(kMaxPid) + ")";
      return false;
    }
    request->pid = static_cast<uint32_t>(pid);
    request->dump = true;
    return true;
  }
  constexpr std::string_view kVerb = "window ";
  if (!line.starts_with(kVerb)) return false;
  const char* begin = line.c_str() + kVerb.size();
  const char* end = line.c_str() + line.size();
  uint64_t pid = 0;
  auto [after_pid, pid_error] = std::from_chars(begin, end, pid);
  if (pid_error != std::errc() || after_pid == begin || pid == 0 || pid > kMaxPid || after_pid == end ||
      *after_pid != ' ')
    return false;
  double seconds = 0;
  auto [after_seconds, seconds_error] = std::from_chars(after_pid + 1, end, seconds);
  if (seconds_error != std::errc() || after_seconds != end || !(seconds > 0) || seconds > 3600) return false;
  request->pid = static_cast<uint32_t>(pid);
  request->duration_s = seconds;
  return true;
}

TriggerServer::TriggerServer()
    : server_(RequestLimits{16, 256, 1'000'000'000,
                            [](std::string_view in) { return in.find('\n') != std::string_view::npos; }}) {}

TriggerServer::~TriggerServer() {
  if (server_.listen_fd() >= 0) unlink(path_.c_str());
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
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  mode_t old = umask(077);
  bool bound = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  umask(old);
  if (!bound || listen(fd, 16) != 0) {
    *error = "cannot listen on " + path + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return false;
  }
  path_ = path;
  server_.Adopt(fd);
  return true;
}

void TriggerServer::Reply(int client, const std::string& line, uint64_t now_ns) {
  server_.Answer(client, LogSafe(line, 4096) + "\n", now_ns);
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
  if (request.dump)
    std::snprintf(text, sizeof text, "dump %u\n", request.pid);
  else
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
