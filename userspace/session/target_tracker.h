// The processes a `record` run traces or waits for, and how each becomes
// traced. Targets: the processes the user named (--pid) or launched, and,
// unless --no-children, the processes they fork. Attached by pid, each
// target gets its own links, filtered by the kernel, so other PyTorch
// processes on the host never trap; a target that has not loaded libtorch
// yet (--wait, or a child that exec'd a new program) is watched at its
// dynamic loader. In launch mode the command is held at each library load
// (one loader probe for every process, BPF filters by pid) until its own
// links are live; a child is held at its fork (where the kernel can) until
// it is attached, so its first op is traced.
//
// A target is traced once the ops set has attached its libtorch; then every
// probe set attaches beside it, again after each of its library loads. The
// tracker learns of forks, execs, loads and exits from procs.bpf.c's events.
#ifndef TORCHPROBE_SESSION_TARGET_TRACKER_H
#define TORCHPROBE_SESSION_TARGET_TRACKER_H

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "userspace/probe_sets/ops/ops_probe_set.h"
#include "userspace/probe_sets/probe_set.h"
#include "userspace/session/proc_names.h"
#include "userspace/session/status_line.h"
#include "userspace/session/target_launcher.h"

namespace torchprobe {

using ProbeSets = std::vector<std::unique_ptr<ProbeSet>>;

class TargetTracker {
 public:
  struct Options {
    bool launch = false;           // -- CMD: the command is launched (else --pid)
    bool wait = false;             // --wait: a named pid is attached when it loads libtorch
    bool follow_children = true;
    bool quiet = false;
  };
  // `ops` is the first of `sets`; `stats()` the window's stats (held
  // children, untraced time); `traced()` is called when a process' libtorch
  // ops are first live (the trace begins).
  TargetTracker(Options options, OpsProbeSet* ops, ProbeSets* sets, ProcNames* names,
                std::function<TraceStats&()> stats, std::function<void()> traced);

  // Plans every named process before anything is loaded: a wrong pid is one
  // line and nothing attached.
  Status Plan(const std::vector<uint32_t>& pids);
  void SetContext(const ProbeSetContext& context);
  void Route(EventRouter& router);

  // Launch mode: forks the command, holds it at its library loads, lets it exec.
  Status Launch(const std::vector<std::string>& command);
  // --pid mode: attaches every named process (an error if one is gone).
  Status AttachNamed(const std::vector<uint32_t>& pids);
  // ... and takes in the children they already have (attached at the next turn).
  void AdoptChildren(const std::vector<uint32_t>& pids);
  // The forks, execs and loads read since the last turn: children held at
  // their fork attached and let go, exec'd programs re-attached, launched
  // processes held at a load attached and let go.
  Status HandleEvents();
  // Thread exits read so far (their process' events are read by now).
  std::vector<tp_proc_event> TakeExits();
  // `pid`'s leader exited: its links go.
  void Exited(uint32_t pid);
  // Whether the launched command or any target still runs.
  bool Alive();
  // At stop: library loads no longer held, nothing left stopped.
  void StopHolding();
  // After the keeper took every link: the tracker's links go.
  void Clear();
  // Launch mode: the command's exit code (waited for; a stop signal gives
  // up on it: 128 + SIGINT).
  int WaitForCommand(StatusLine& status_line);
  // Why a child may have run untraced until attached (the summary's words).
  std::string why_untraced_children() const;

 private:
  struct Target {
    uint32_t pid = 0;
    std::string role;             // "" (named by the user or launched), "child of P"
    std::string loader;           // identity of the dynamic loader watched for it
    ProbeLinks loads;             // its loader watch
    bool attach_pending = false;  // attached at the next turn
    bool exited = false;
    uint64_t forked_ns = 0;       // a child not held: its fork, until its links are live
  };
  struct ForkEvent {
    uint32_t parent = 0;
    uint32_t child = 0;
    bool held = false;  // stopped before its first instruction: resume once attached
    uint64_t ts_ns = 0;
  };
  // A process' dynamic loader, where library loads are watched.
  struct Loader {
    std::string host_path;
    std::string identity;
  };
  void OnProcEvent(const tp_proc_event& event);
  Target& Add(uint32_t pid, std::string role);
  // Attaches `t` to the libtorch it maps and the sets beside it, or (--pid
  // mode) watches its loader while it maps none yet.
  Status Attach(Target& t);
  std::optional<Loader> FindLoader(uint32_t pid);
  StatusOr<ProbeLinks> WatchLoader(const Loader& loader, int pid);
  void WatchLoads(Target& t);
  // `t`'s program is gone (exec): the sets let go of its images.
  void ReleaseImages(Target& t);
  void Release(Target& t);
  void OnLaunchExec(uint32_t pid);
  void ResumeHeld();

  Options options_;
  OpsProbeSet* ops_;
  ProbeSets* sets_;
  ProcNames* names_;
  std::function<TraceStats&()> stats_;
  std::function<void()> traced_;
  ProbeSetContext context_;
  TargetLauncher launcher_;
  int command_status_ = -1;                   // wait status once reaped
  std::map<uint32_t, Target> targets_;        // by pid
  std::set<std::string> launch_loaders_;      // launch mode: loaders watched for all
  std::vector<ProbeLinks> launch_links_;      // launch mode: links for every process
  std::vector<uint32_t> pending_loads_;
  std::vector<uint32_t> pending_execs_;
  std::vector<ForkEvent> pending_forks_;
  std::vector<tp_proc_event> pending_exits_;  // thread exits not yet applied
};

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_TARGET_TRACKER_H
