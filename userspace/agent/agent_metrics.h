// The agent's health counters, in Prometheus' text exposition format
// (version 0.0.4) on a localhost TCP port (--metrics ADDR) and as a line in
// the log after every window. The port answers through a RequestServer
// (request_server.h): each request's headers within 1 s and 8 KiB, at most
// 16 read at once. An address other than loopback (127.0.0.0/8) is refused
// unless --metrics-any-address asks for it: every host that can reach the
// port would read the counters.
#ifndef TORCHPROBE_AGENT_AGENT_METRICS_H
#define TORCHPROBE_AGENT_AGENT_METRICS_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/agent/request_server.h"
#include "userspace/agent/window_digest.h"

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
  uint64_t targets_left_out = 0; // gauge: processes that would be targets, past --max-targets
  uint64_t windows_capped = 0;   // windows that waited for one of --max-windows to end
  uint64_t windows_overdue = 0;  // records stopped for running far past their window (a stuck target file)
  uint64_t plan_cache_rejected = 0;  // cached probe plans that did not match their image (replanned)
  uint64_t clients_dropped = 0;  // trigger and metrics clients past their deadline or byte budget
  uint64_t clients_refused = 0;  // triggers refused: too many waiting
  uint64_t accept_failures = 0;  // connections left in the backlog for want of file descriptors
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

// A target's gauges, labelled by what tells ranks and jobs apart on a
// dashboard: what its last window showed (window_digest.h). A gauge a
// window could not measure (no step, no GPU activity) is left out, not 0.
struct TargetWindows {
  uint64_t written = 0;       // windows written of it
  WindowDigest last;          // its last window's
  uint64_t last_cost_ns = 0;  // what its last window cost it (duty_budget.h)
  LeakGrowth leaks;           // --memory: its leak candidates, window after window
};
struct TargetGauges {
  uint32_t pid = 0;
  std::string rank, job, container;  // the target's text: escaped as label values
  TargetWindows windows;
};

// The exposition text: HELP and TYPE lines, then each sample; the agent's
// counters (torchprobe_agent_*), then each target's gauges
// (torchprobe_target_*{pid,rank,job,container}) for targets with a window.
std::string MetricsText(const AgentCounters& counters, const std::vector<TargetGauges>& targets = {});
// One log line: "windows 3 taken, 1 skipped, ...".
std::string MetricsLogLine(const AgentCounters& counters);

// A minimal HTTP/1.0 responder for GET requests, driven by the agent's poll loop.
class MetricsServer {
 public:
  MetricsServer();
  // ADDR is HOST:PORT (HOST an IPv4 address, 127.0.0.1 for local only; PORT 0
  // takes a free one); HOST outside 127.0.0.0/8 only with `any_address`.
  // Returns false with *error.
  bool Listen(const std::string& address, bool any_address, std::string* error);
  RequestServer& server() { return server_; }
  // "127.0.0.1:PORT" as bound; "" when not listening.
  std::string bound() const { return bound_; }
  // Answers a request of server() with `text` (405 for anything but GET).
  void Answer(const Request& request, const std::string& text, uint64_t now_ns);

 private:
  RequestServer server_;
  std::string bound_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_AGENT_METRICS_H
