// One sampling window on one target, as a child `torchprobe record` process.
//
// Why a child and not RunRecord in the agent: a window is then a bounded,
// self-cleaning capture with nothing shared with the long-running agent. Its
// BPF objects, links, ring buffers and ptrace state live and die with the
// child, so a window cannot leak probes or memory into the next, a fault in
// one window (a target exiting mid-attach, a bug) ends that child and not
// the agent, and record's probe keeper removes the probes however the child
// ends. The child gets PR_SET_PDEATHSIG(SIGTERM): if the agent dies, even by
// SIGKILL, the child stops at once, and its probes come off; what it wrote
// stays in the agent's temporary folder, which the next agent start empties.
// The cost is the child's start (exec, BPF loading, ~0.3 s of its CPU), paid
// on the agent's side, not the target's; libtorch's probe plan, the costly
// part of a start (~2 s for 1.13), is planned once and cached on disk.
// Windows are not --compress'ed: on a busy loop record's compressing writer
// falls behind and a 1 s window ran ~20 s (a record issue, reported).
//
// The child writes into the store's temporary folder as the agent opened
// and checked it (window_store.h): it starts in that folder (fchdir) and
// names its files relative to it, so no path the agent did not check is
// followed. Its environment is the agent's, with $TORCHPROBE_PLAN_CACHE set
// to the agent's --plan-cache (or removed when there is none).
#ifndef TORCHPROBE_AGENT_WINDOW_CHILD_H
#define TORCHPROBE_AGENT_WINDOW_CHILD_H

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/session/flight_options.h"

namespace torchprobe {

// What a window captures beyond ops, annotations and steps: record's
// options of the same names, passed to every window's record. Each extra
// file is the window's name with another suffix (CompanionName), kept,
// indexed and rotated with it (window_store.h).
struct WindowContents {
  bool memory = false;        // --memory: every CPU allocation and free
  bool shapes = false;        // --shapes: each op's Tensor arguments
  bool python_stacks = false; // --python-stacks: each op's Python stack
  bool sched = false;         // --sched: each thread's times off its CPU
  bool et = false;            // --et: PyTorch's execution trace, NAME.et.json
  bool chrome = false;        // --chrome: Kineto-style JSON, NAME.kineto.json
  bool inject_cupti = false;  // --inject-cupti: GPU activity (loads the collector into the target: opt-in)
  uint64_t steps = 0;         // --steps N: a window is N whole training steps (0: seconds)
  std::string step_marker;    // --step-marker: what ends a step ("" for the optimizer's step)

  // The suffixes of the files a window of these contents writes besides
  // its .pftrace, in a fixed order.
  std::vector<std::string> CompanionSuffixes() const;
};

struct WindowRequest {
  uint32_t pid = 0;
  double duration_s = 1;
  int folder_fd = -1;      // the folder record writes in (the store's .partial)
  std::string output;      // the Perfetto file record writes, a name in that folder
  std::string log;         // record's stdout and stderr go here, a new name in that folder
  std::string plan_cache;  // $TORCHPROBE_PLAN_CACHE for record (discover/probe_plan_cache.h); "" for none
  std::string mode;        // record's --mode for its files ("0600")
  std::string attach = "auto";  // record's --attach
  WindowContents contents;
  FlightOptions flight;    // seconds > 0: a flight recorder, not a window (no --duration)
};

// Starts `/proc/self/exe record --pid P --duration S --no-children --mode M
// [--attach A] [contents] -o OUTPUT`; returns the child's pid, or -1 with
// *error. With contents.steps, --duration bounds how long the window waits
// for and runs its steps.
pid_t StartWindow(const WindowRequest& request, std::string* error);

// The child's environment: `environment` (NAME=VALUE entries) with
// $TORCHPROBE_PLAN_CACHE replaced by `plan_cache`, or removed when it is "".
std::vector<std::string> WindowEnvironment(const char* const* environment, const std::string& plan_cache);

// What the agent takes from record's log (its first MiB), read as bytes:
// the log holds the target's text (its comm, paths), so no parser that can
// throw or recurse per character reads it.
struct WindowLog {
  // The detach time record's summary line reports ("..., detach 12.3 ms;"),
  // in ns; 0 when none. The trace's own stats cannot hold it: the trace is
  // written before the probes come off.
  uint64_t detach_ns = 0;
  uint64_t plan_cache_rejected = 0;  // lines saying a cached plan did not match its image
  std::string last_line;             // the last line that is not empty: why a window failed
};
WindowLog ReadWindowLog(const std::string& log_path);

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_WINDOW_CHILD_H
