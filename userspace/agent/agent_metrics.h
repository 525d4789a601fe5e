// The agent's health counters, in Prometheus' text exposition format
// (version 0.0.4) on a localhost TCP port (--metrics ADDR) and as a line in
// the log after every window.
#ifndef TORCHPROBE_AGENT_AGENT_METRICS_H
#define TORCHPROBE_AGENT_AGENT_METRICS_H

#include <cstdint>
#include <string>

namespace torchprobe {

struct AgentCounters {
  uint64_t windows_taken = 0;    // windows written
  uint64_t windows_skipped = 0;  // scheduled windows the budget (or a window still running) left out
  uint64_t windows_skipped_removing = 0;  // ... of which while the last window's keeper removed probes
  uint64_t windows_failed = 0;   // record ran and wrote no window (target gone, error)
  uint64_t attach_failures = 0;  // of those, record could not attach
  uint64_t events = 0;           // op events in the windows written
  uint64_t dropped_events = 0;   // events lost in BPF in those windows
  uint64_t bytes_written = 0;    // bytes of the windows written
  uint64_t files_removed = 0;    // by rotation
  uint64_t targets_found = 0;    // processes found mapping libtorch_cpu.so
  uint64_t targets = 0;          // gauge: targets alive now
  uint64_t keepers = 0;          // gauge: past windows' keepers still removing probes (keeper_reaper.h)
  uint64_t files = 0;            // gauge: window files in the folder
  uint64_t bytes_on_disk = 0;    // gauge: their bytes
  uint64_t cost_ns = 0;          // what the windows cost the targets (duty_budget.h)
  uint64_t target_cpu_ns = 0;    // the targets' CPU time while sampled
  double duty_cycle() const {
    return target_cpu_ns ? static_cast<double>(cost_ns) / static_cast<double>(target_cpu_ns) : 0;
  }
};

// The exposition text: HELP and TYPE lines, then each sample.
std::string MetricsText(const AgentCounters& counters);
// One log line: "windows 3 taken, 1 skipped, ...".
std::string MetricsLogLine(const AgentCounters& counters);

// A minimal HTTP/1.0 responder for GET requests, driven by the agent's poll loop.
class MetricsServer {
 public:
  ~MetricsServer();
  // ADDR is HOST:PORT (HOST an IPv4 address, 127.0.0.1 for local only; PORT 0
  // takes a free one). Returns false with *error.
  bool Listen(const std::string& address, std::string* error);
  int fd() const { return fd_; }
  // "127.0.0.1:PORT" as bound.
  std::string bound() const { return bound_; }
  // Accepts one connection and answers it with `text` (bounded reads: a
  // silent client is dropped after 200 ms).
  void Answer(const std::string& text);

 private:
  int fd_ = -1;
  std::string bound_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_AGENT_METRICS_H
