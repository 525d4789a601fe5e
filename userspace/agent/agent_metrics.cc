#include "userspace/agent/agent_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace torchprobe {
namespace {

void Metric(std::string* out, const char* name, const char* type, const char* help, const std::string& value) {
  *out += std::string("# HELP torchprobe_agent_") + name + " " + help + "\n";
  *out += std::string("# TYPE torchprobe_agent_") + name + " " + type + "\n";
  *out += std::string("torchprobe_agent_") + name + " " + value + "\n";
}

std::string U(uint64_t value) { return std::to_string(value); }

}  // namespace

std::string MetricsText(const AgentCounters& c) {
  std::string out;
  Metric(&out, "windows_taken_total", "counter", "Sampling windows written.", U(c.windows_taken));
  Metric(&out, "windows_skipped_total", "counter", "Scheduled windows left out (the duty-cycle budget, a window still running, probes still coming off).",
         U(c.windows_skipped));
  Metric(&out, "windows_skipped_removing_total", "counter",
         "Of the skipped windows, those left out while the target's last window's keeper removed its probes.",
         U(c.windows_skipped_removing));
  Metric(&out, "windows_failed_total", "counter", "Windows that wrote nothing (target gone, error).",
         U(c.windows_failed));
  Metric(&out, "attach_failures_total", "counter", "Windows whose record could not attach.", U(c.attach_failures));
  Metric(&out, "events_total", "counter", "Op events in the windows written.", U(c.events));
  Metric(&out, "dropped_events_total", "counter", "Events lost in BPF in the windows written.",
         U(c.dropped_events));
  Metric(&out, "bytes_written_total", "counter", "Bytes of the windows written.", U(c.bytes_written));
  Metric(&out, "files_removed_total", "counter", "Window files removed by rotation.", U(c.files_removed));
  Metric(&out, "targets_found_total", "counter", "Processes found mapping libtorch_cpu.so.", U(c.targets_found));
  Metric(&out, "targets", "gauge", "Targets alive now.", U(c.targets));
  Metric(&out, "keepers", "gauge", "Past windows' probe keepers still removing probes.", U(c.keepers));
  Metric(&out, "files", "gauge", "Window files in the output folder.", U(c.files));
  Metric(&out, "bytes_on_disk", "gauge", "Bytes of the window files in the output folder.", U(c.bytes_on_disk));
  char duty[32];
  std::snprintf(duty, sizeof duty, "%.6f", c.duty_cycle());
  Metric(&out, "duty_cycle", "gauge", "Windows' measured cost to the targets over the targets' CPU time.", duty);
  return out;
}

std::string MetricsLogLine(const AgentCounters& c) {
  char line[512];
  std::snprintf(line, sizeof line,
                "windows %llu taken, %llu skipped, %llu failed (%llu attach failures); %llu events, %llu dropped; "
                "%llu bytes written, %llu files (%llu bytes) kept, %llu removed; %llu targets, %llu keepers; "
                "duty cycle %.3f%%",
                (unsigned long long)c.windows_taken, (unsigned long long)c.windows_skipped,
                (unsigned long long)c.windows_failed, (unsigned long long)c.attach_failures,
                (unsigned long long)c.events, (unsigned long long)c.dropped_events,
                (unsigned long long)c.bytes_written, (unsigned long long)c.files,
                (unsigned long long)c.bytes_on_disk, (unsigned long long)c.files_removed,
                (unsigned long long)c.targets, (unsigned long long)c.keepers, 100 * c.duty_cycle());
  return line;
}

MetricsServer::~MetricsServer() {
  if (fd_ >= 0) close(fd_);
}

bool MetricsServer::Listen(const std::string& address, std::string* error) {
  size_t colon = address.rfind(':');
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  char* end = nullptr;
  unsigned long port = colon == std::string::npos ? 0 : std::strtoul(address.c_str() + colon + 1, &end, 10);
  if (colon == std::string::npos || end == address.c_str() + colon + 1 || *end || port > 65535 ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    *error = "invalid --metrics '" + address + "': expected IPV4:PORT, e.g. 127.0.0.1:9464";
    return false;
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd_, 16) != 0) {
    *error = "cannot serve metrics on " + address + ": " + std::strerror(errno);
    return false;
  }
  socklen_t len = sizeof addr;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  bound_ = address.substr(0, colon) + ":" + std::to_string(ntohs(addr.sin_port));
  return true;
}

void MetricsServer::Answer(const std::string& text) {
  int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (client < 0) return;
  timeval timeout = {0, 200'000};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos &&
         request.size() < 8192) {
    ssize_t n = read(client, buffer, sizeof buffer);
    if (n <= 0) break;
    request.append(buffer, static_cast<size_t>(n));
  }
  std::string response;
  if (request.rfind("GET ", 0) == 0) {
    response = "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
               std::to_string(text.size()) + "\r\n\r\n" + text;
  } else {
    response = "HTTP/1.0 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n";
  }
  size_t sent = 0;
  while (sent < response.size()) {
    ssize_t n = send(client, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  close(client);
}

}  // namespace torchprobe
