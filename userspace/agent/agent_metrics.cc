#include "userspace/agent/agent_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace torchprobe {
namespace {

void Metric(std::string* out, const char* name, const char* type, const char* help, const std::string& value) {
  *out += std::string("# HELP torchprobe_agent_") + name + " " + help + "\n";
  *out += std::string("# TYPE torchprobe_agent_") + name + " " + type + "\n";
  *out += std::string("torchprobe_agent_") + name + " " + value + "\n";
}

std::string U(uint64_t value) { return std::to_string(value); }

std::string Seconds(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9f", static_cast<double>(ns) / 1e9);
  return text;
}

// A label value as the exposition format quotes it: backslash, quote and
// newline escaped; any other byte outside printable ASCII as '?' (the text
// is the target's to choose).
std::string LabelValue(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += (c < 0x20 || c > 0x7e) ? '?' : static_cast<char>(c);
  }
  return out;
}

std::string Labels(const TargetGauges& t) {
  return "{pid=\"" + U(t.pid) + "\",rank=\"" + LabelValue(t.rank) + "\",job=\"" + LabelValue(t.job) +
         "\",container=\"" + LabelValue(t.container) + "\"}";
}

// One family of per-target samples: HELP and TYPE once, then a sample per
// target that has a value (`value` returns "" for none); nothing at all
// when no target has one.
template <typename Value>
void TargetMetric(std::string* out, const std::vector<TargetGauges>& targets, const char* name, const char* type,
                  const char* help, Value value) {
  std::string samples;
  for (const TargetGauges& t : targets)
    if (std::string v = value(t); !v.empty()) samples += std::string("torchprobe_target_") + name + Labels(t) + " " + v + "\n";
  if (samples.empty()) return;
  *out += std::string("# HELP torchprobe_target_") + name + " " + help + "\n";
  *out += std::string("# TYPE torchprobe_target_") + name + " " + type + "\n";
  *out += samples;
}

// Each target's growing leaks (leak_growth.h), one sample per op.
void LeakMetric(std::string* out, const std::vector<TargetGauges>& targets, const char* name, const char* help,
                uint64_t GrowingLeak::*field) {
  std::string samples;
  for (const TargetGauges& t : targets)
    for (const GrowingLeak& leak : t.windows.leaks.Growing()) {
      std::string labels = Labels(t);
      labels.insert(labels.size() - 1, ",op=\"" + LabelValue(leak.op) + "\"");
      samples += std::string("torchprobe_target_") + name + labels + " " + U(leak.*field) + "\n";
    }
  if (samples.empty()) return;
  *out += std::string("# HELP torchprobe_target_") + name + " " + help + "\n";
  *out += std::string("# TYPE torchprobe_target_") + name + " gauge\n";
  *out += samples;
}

void TargetMetrics(std::string* out, const std::vector<TargetGauges>& targets) {
  TargetMetric(out, targets, "windows_total", "counter", "Windows written of the process.",
               [](const TargetGauges& t) { return U(t.windows.written); });
  TargetMetric(out, targets, "steps", "gauge", "Training steps (ProfilerStep#) in its last window.",
               [](const TargetGauges& t) { return t.windows.written ? U(t.windows.last.steps) : ""; });
  TargetMetric(out, targets, "step_p50_seconds", "gauge", "Median step wall time in its last window.",
               [](const TargetGauges& t) { return t.windows.last.steps ? Seconds(t.windows.last.step_p50_ns) : ""; });
  TargetMetric(out, targets, "step_max_seconds", "gauge", "Longest step wall time in its last window.",
               [](const TargetGauges& t) { return t.windows.last.steps ? Seconds(t.windows.last.step_max_ns) : ""; });
  TargetMetric(out, targets, "op_seconds", "gauge", "Time in ops (outermost op slices, all threads) in its last window.",
               [](const TargetGauges& t) { return t.windows.written ? Seconds(t.windows.last.op_ns) : ""; });
  TargetMetric(out, targets, "gpu_busy_seconds", "gauge",
               "Time a GPU ran its work in its last window, per device, summed (windows with --inject-cupti).",
               [](const TargetGauges& t) { return t.windows.last.gpu ? Seconds(t.windows.last.gpu_busy_ns) : ""; });
  TargetMetric(out, targets, "probe_cost_seconds", "gauge",
               "What its last window cost it: attach, probe hits, detach (the duty budget's measure).",
               [](const TargetGauges& t) { return t.windows.written ? Seconds(t.windows.last_cost_ns) : ""; });
  LeakMetric(out, targets, "leak_growing_bytes",
             "Bytes an op left alive, window after window (--memory): a leak candidate in each of its last "
             "windows (at least 3 in a row), summed over them.",
             &GrowingLeak::bytes);
  LeakMetric(out, targets, "leak_growing_windows", "How many windows in a row the op has been a leak candidate.",
             &GrowingLeak::windows);
}

}  // namespace

std::string MetricsText(const AgentCounters& c, const std::vector<TargetGauges>& targets) {
  std::string out;
  Metric(&out, "windows_taken_total", "counter", "Sampling windows written.", U(c.windows_taken));
  Metric(&out, "windows_skipped_total", "counter", "Scheduled windows left out (the duty-cycle budget, a window still running, probes still coming off).",
         U(c.windows_skipped));
  Metric(&out, "windows_skipped_removing_total", "counter",
         "Of the skipped windows, those left out while the target's last window's keeper removed its probes.",
         U(c.windows_skipped_removing));
  Metric(&out, "windows_failed_total", "counter", "Windows that wrote nothing (target gone, error, overdue).",
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
  Metric(&out, "targets_left_out", "gauge", "Processes that would be targets, left out past --max-targets.",
         U(c.targets_left_out));
  Metric(&out, "windows_capped_total", "counter", "Windows that waited for one of --max-windows to end.",
         U(c.windows_capped));
  Metric(&out, "windows_overdue_total", "counter", "Records stopped for running far past their window.",
         U(c.windows_overdue));
  Metric(&out, "plan_cache_rejected_total", "counter", "Cached probe plans that did not match their image.",
         U(c.plan_cache_rejected));
  Metric(&out, "clients_dropped_total", "counter", "Trigger and metrics clients past their deadline or size.",
         U(c.clients_dropped));
  Metric(&out, "clients_refused_total", "counter", "Triggers refused: too many waiting.", U(c.clients_refused));
  Metric(&out, "accept_failures_total", "counter", "Connections not accepted for want of file descriptors.",
         U(c.accept_failures));
  Metric(&out, "files", "gauge", "Window files in the output folder.", U(c.files));
  Metric(&out, "bytes_on_disk", "gauge", "Bytes of the window files in the output folder.", U(c.bytes_on_disk));
  char duty[32];
  std::snprintf(duty, sizeof duty, "%.6f", c.duty_cycle());
  Metric(&out, "duty_cycle", "gauge",
         "Windows' measured cost to the targets (a failed window: its record's CPU time) over the targets' CPU time.",
         duty);
  TargetMetrics(&out, targets);
  return out;
}

std::string MetricsLogLine(const AgentCounters& c) {
  char line[640];
  std::snprintf(line, sizeof line,
                "windows %llu taken, %llu skipped, %llu capped, %llu failed (%llu attach failures, %llu overdue); "
                "%llu events, %llu dropped; %llu bytes written, %llu files (%llu bytes) kept, %llu removed; "
                "%llu targets (%llu left out), %llu keepers; %llu clients dropped; duty cycle %.3f%%",
                (unsigned long long)c.windows_taken, (unsigned long long)c.windows_skipped,
                (unsigned long long)c.windows_capped, (unsigned long long)c.windows_failed,
                (unsigned long long)c.attach_failures, (unsigned long long)c.windows_overdue,
                (unsigned long long)c.events, (unsigned long long)c.dropped_events,
                (unsigned long long)c.bytes_written, (unsigned long long)c.files,
                (unsigned long long)c.bytes_on_disk, (unsigned long long)c.files_removed,
                (unsigned long long)c.targets, (unsigned long long)c.targets_left_out, (unsigned long long)c.keepers,
                (unsigned long long)c.clients_dropped, 100 * c.duty_cycle());
  return line;
}

MetricsServer::MetricsServer()
    : server_(RequestLimits{16, 8192, 1'000'000'000, [](std::string_view in) {
        return in.find("\r\n\r\n") != std::string_view::npos || in.find("\n\n") != std::string_view::npos;
      }}) {}

bool MetricsServer::Listen(const std::string& address, bool any_address, std::string* error) {
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
  if ((ntohl(addr.sin_addr.s_addr) >> 24) != 127 && !any_address) {
    *error = "--metrics " + address + " is not a loopback address: every host that reaches it reads the "
             "counters; add --metrics-any-address to serve it there";
    return false;
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 16) != 0) {
    *error = "cannot serve metrics on " + address + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return false;
  }
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  bound_ = address.substr(0, colon) + ":" + std::to_string(ntohs(addr.sin_port));
  server_.Adopt(fd);
  return true;
}

void MetricsServer::Answer(const Request& request, const std::string& text, uint64_t now_ns) {
  std::string response;
  if (request.text.rfind("GET ", 0) == 0) {
    response = "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
               std::to_string(text.size()) + "\r\n\r\n" + text;
  } else {
    response = "HTTP/1.0 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n";
  }
  server_.Answer(request.client, std::move(response), now_ns);
}

}  // namespace torchprobe
