// `torchprobe record`: discover, load, attach, drain, model, write — the
// whole pipeline for one run, in --pid mode or launch mode.
#ifndef TORCHPROBE_SESSION_RECORD_SESSION_H
#define TORCHPROBE_SESSION_RECORD_SESSION_H

#include <cstdint>
#include <string>
#include <vector>

namespace torchprobe {

struct RecordOptions {
  std::vector<uint32_t> pids;        // --pid: attach to these (each once)
  std::vector<std::string> command;  // -- CMD...: launch and follow forks
  std::string output;                // -o
  double duration_s = 0;             // --duration; 0: until stopped or the targets exit
  bool wait = false;                 // --wait: attach when a pid loads libtorch
  bool follow_children = true;       // --no-children clears it
  std::string attach = "auto";       // --attach auto|multi|uprobe
  std::string returns = "auto";      // --returns auto|uretprobe|ret
  bool empty_probes = false;         // --empty-probes: no-op programs (bench floor)
  bool empty_uretprobes = false;     // --empty-probes=uretprobe: returns through uretprobes
  int drain_ms = 20;                 // ring buffer drain period
  uint32_t ring_mb = 64;             // op ring buffer size
  bool quiet = false;                // no summary line
  std::string step_marker;           // --step-marker: ends a ProfilerStep# ("": the optimizer's step)
};

// Runs a recording; returns the process exit code (0 ok, 1 runtime error)
// after printing any error as one line on stderr.
int RunRecord(const RecordOptions& options);

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_RECORD_SESSION_H
