// `torchprobe agent`: a long-running host agent that finds PyTorch processes
// itself and samples each in windows under a duty-cycle budget.
#ifndef TORCHPROBE_AGENT_AGENT_H
#define TORCHPROBE_AGENT_AGENT_H

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "userspace/agent/target_scan.h"
#include "userspace/agent/window_child.h"

namespace torchprobe {

struct AgentOptions {
  std::string dir;                  // -o: the output folder
  double every_s = 60;              // --every: a window per target this often (at most)
  double window_s = 2;              // --window: each window's length
  double align_s = 0;               // --align: windows start at wall-clock multiples of it (0: when due)
  double budget_pct = 1;            // --budget: the duty cycle's bound, percent (0: none)
  uint64_t max_bytes = 1ull << 30;  // --max-bytes: window files kept, in bytes (0: no bound)
  uint64_t max_files = 1000;        // --max-files: ... in files (0: no bound)
  TargetFilter filter;              // --match-comm, --match-cgroup, --match-cmdline, --pid
  std::string socket;               // --socket: where `trigger` reaches it
  std::string metrics;              // --metrics HOST:PORT; "" for none
  bool metrics_any_address = false; // --metrics-any-address: a HOST other than loopback
  double scan_s = 1;                // --scan: how often /proc is walked for new targets
  // --plan-cache (else $TORCHPROBE_PLAN_CACHE, else this): libtorch probe plans; "" for none
  std::string plan_cache = "/var/cache/torchprobe/plans";
  size_t max_targets = 256;         // --max-targets: processes sampled at once; more are counted, left out
  size_t max_windows = 4;           // --max-windows: records running at once; more windows wait
  mode_t mode = 0600;               // --mode: the windows' and the index's file mode
  std::string attach = "auto";      // --attach: record's, for every window
  WindowContents contents;          // --memory, --shapes, --et, --chrome, --inject-cupti, --steps, --step-marker
  // --job-env: the environment variable that names a target's job in the
  // metrics ("" : TORCHELASTIC_RUN_ID, else MASTER_ADDR:MASTER_PORT)
  std::string job_env;
  FlightOptions flight;             // --flight-recorder and its settings: a record per target
  bool dump_at_stop = false;        // --dump-at-stop: each target's dump at SIGTERM
  bool windows = true;              // --no-windows clears it: the flight recorder only
};

// Runs until SIGTERM or SIGINT; returns 0 then, 1 when it cannot start.
int RunAgent(const AgentOptions& options);

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_AGENT_H
