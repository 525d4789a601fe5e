// `torchprobe record`: discover, load, attach, drain, model, write — the
// whole pipeline for one run, in --pid mode or launch mode.
#ifndef TORCHPROBE_SESSION_RECORD_SESSION_H
#define TORCHPROBE_SESSION_RECORD_SESSION_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/session/flight_options.h"
#include "userspace/session/window_schedule.h"

namespace torchprobe {

// The largest --ring-mb: BPF sizes a ring buffer by a 32-bit byte count, so
// 2^31 bytes is the largest power of 2 it takes.
inline constexpr uint32_t kMaxRingMb = 2048;

struct RecordOptions {
  std::vector<uint32_t> pids;        // --pid: attach to these (each once)
  std::vector<std::string> command;  // -- CMD...: launch and follow forks
  std::string output;                // -o: Perfetto; "" when only JSON formats are asked for
  bool compress = false;             // --compress: packets zlib-deflated in the Perfetto trace
  std::string et_output;             // --et: execution trace JSON; "" for none
  std::string chrome_output;         // --chrome: Kineto-style Chrome JSON; "" for none
  double duration_s = 0;             // --duration; 0: until stopped or the targets exit
  WindowOptions windows;             // --start-after, --window, --every (SIGUSR1 toggles)
  bool wait = false;                 // --wait: attach when a pid loads libtorch
  bool follow_children = true;       // --no-children clears it
  bool hold_children = true;         // --no-hold-children clears it: children run untraced until attached
  std::string attach = "auto";       // --attach auto|multi|uprobe
  std::string returns = "auto";      // --returns auto|uretprobe|ret
  bool empty_probes = false;         // --empty-probes: no-op programs (bench floor)
  bool empty_uretprobes = false;     // --empty-probes=uretprobe: returns through uretprobes
  int drain_ms = 20;                 // ring buffer drain period
  uint32_t ring_mb = 64;             // op ring buffer size, a power of 2 up to kMaxRingMb
  bool quiet = false;                // no summary line
  bool memory = false;               // --memory: CPU allocations and frees too
  std::string memory_timeline;       // --memory-timeline FILE.json|FILE.html (implies memory)
  std::string memory_snapshot;       // --memory-snapshot FILE.pickle (implies memory)
  bool shapes = false;               // --shapes: ops' Tensor arguments (record_shapes=True)
  bool python_stacks = false;        // --python-stacks: the Python stack of each op (with_stack=True)
  bool sched = false;                // --sched: each traced thread's times off its CPU, and why
  bool cupti = false;                // --cupti: the launched command gets the CUPTI collector
  bool inject_cupti = false;         // --inject-cupti (implies cupti): loaded into the --pid processes
  std::string step_marker;           // --step-marker: ends a ProfilerStep# ("": the optimizer's step)
  FlightOptions flight;              // --flight-recorder and its settings
};

// Runs a recording; returns the process exit code (0 ok, 1 runtime error)
// after printing any error as one line on stderr.
int RunRecord(const RecordOptions& options);

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_RECORD_SESSION_H
