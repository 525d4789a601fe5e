#include "userspace/session/target_tracker.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#include "userspace/base/clock.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/session/record_signals.h"
#include "userspace/session/run_summary.h"
#include "userspace/session/status_line.h"

namespace torchprobe {
namespace {

constexpr const char* kLoader = "ld-linux";

}  // namespace

TargetTracker::TargetTracker(Options options, OpsProbeSet* ops, ProbeSets* sets, ProcNames* names,
                             std::function<TraceStats&()> stats, std::function<void()> traced)
    : options_(options), ops_(ops), sets_(sets), names_(names), stats_(std::move(stats)), traced_(std::move(traced)) {}

Status TargetTracker::Plan(const std::vector<uint32_t>& pids) {
  for (uint32_t pid : pids) {
    StatusOr<MappedImage> image = FindMappedImage(pid, kTorchLibrary);
    if (!image.ok()) {
      if (!options_.wait || !IsProcessAlive(pid)) return image.status();
      continue;  // --wait: attached when it loads libtorch
    }
    Status status = ops_->Plan(*image);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

void TargetTracker::SetContext(const ProbeSetContext& context) {
  context_ = context;
  // Attached by pid, a target's library loads are watched (--wait, children
  // that exec); launch mode holds the command at each load instead.
  if (!options_.launch) context_.bpf->SetLoads(LOADS_WATCH);
}

void TargetTracker::Route(EventRouter& router) {
  router.On<tp_proc_event>({EV_LIB_LOAD, EV_PROC_FORK, EV_PROC_EXEC, EV_PROC_EXIT},
                           [this](const tp_proc_event& event) { OnProcEvent(event); });
}

TargetTracker::Target& TargetTracker::Add(uint32_t pid, std::string role) {
  Target& t = targets_[pid];
  if (t.pid == 0) {
    t.pid = pid;
    t.role = std::move(role);
    if (!t.role.empty()) names_->SetRole(pid, t.role);
    context_.bpf->AddPid(pid);  // forks, execs and exits are seen for it
    for (auto& set : *sets_) set->Follow(pid, 0);  // a fork's was followed at its event
  }
  return t;
}

std::optional<TargetTracker::Loader> TargetTracker::FindLoader(uint32_t pid) {
  StatusOr<MappedImage> loader = FindMappedImage(pid, kLoader);
  if (!loader.ok()) return std::nullopt;  // a static program: it cannot dlopen libtorch
  std::string identity = ImageIdentity(loader->host_path);
  if (identity.empty()) return std::nullopt;  // gone meanwhile
  return Loader{loader->host_path, identity};
}

StatusOr<ProbeLinks> TargetTracker::WatchLoader(const Loader& loader, int pid) {
  StatusOr<uint64_t> offset = FindFunctionOffset(loader.host_path, "_dl_debug_state");
  if (!offset.ok()) return offset.status();
  return AttachFunction({loader.host_path, pid, context_.use_uprobe_multi, context_.keeper},
                        context_.bpf->Program("dl_state"), *offset);
}

void TargetTracker::WatchLoads(Target& t) {
  std::optional<Loader> loader = FindLoader(t.pid);
  if (!loader || loader->identity == t.loader) return;
  StatusOr<ProbeLinks> links = WatchLoader(*loader, static_cast<int>(t.pid));
  if (!links.ok()) return;  // it is gone, or the loader has no such symbol: not traced
  t.loads = std::move(*links);
  t.loader = loader->identity;
}

Status TargetTracker::Attach(Target& t) {
  StatusOr<MappedImage> image = FindMappedImage(t.pid, kTorchLibrary);
  if (!image.ok()) {
    // Not yet (or gone meanwhile). Launch mode watches every loader of the command.
    if (!options_.launch && IsProcessAlive(t.pid)) WatchLoads(t);
    return Status::Ok();
  }
  TracedProcess process{t.pid, image->host_path, ImageIdentity(image->host_path)};
  if (process.torch_identity.empty()) return Status::Ok();  // gone meanwhile
  if (process.torch_identity != ops_->TorchOf(t.pid)) {
    StatusOr<bool> live = ops_->AttachTorch(process);
    if (!live.ok()) return live.status();
    if (!*live) {
      // A short-lived child (a worker that ran a moment) is not an error.
      if (!t.role.empty()) return Status::Ok();
      return Status::Error("process " + std::to_string(t.pid) + " exited while it was being attached");
    }
    context_.bpf->MarkAttached(t.pid);
    traced_();
    // Not held at its fork (a kernel before 6.13, a vfork'd child attached
    // by pid): what it ran until now was not traced. Said in its name,
    // counted; one exiting as it was attached was never traced.
    uint64_t forked_ns = std::exchange(t.forked_ns, 0);
    if (forked_ns && IsProcessAlive(t.pid)) {
      uint64_t untraced = NowNs() - forked_ns;
      ++stats_().children_untraced;
      stats_().children_untraced_ns += untraced;
      names_->SetRole(t.pid, t.role + ", traced from " + FormatDuration(untraced) + " after its fork");
    }
  }
  for (auto& set : *sets_) {
    Status status = set->Attach(process);
    // A process gone meanwhile (a worker that ran a moment) has nothing
    // left to trace: not an error.
    if (!status.ok()) return IsProcessAlive(t.pid) ? status : Status::Ok();
  }
  return Status::Ok();
}

void TargetTracker::ReleaseImages(Target& t) {
  for (auto& set : *sets_) set->Release(t.pid);
}

void TargetTracker::Release(Target& t) {
  ReleaseImages(t);
  t.loads.Detach();
  t.loader.clear();
  for (auto& set : *sets_) set->Exited(t.pid);
}

Status TargetTracker::Launch(const std::vector<std::string>& command) {
  // Stop the command at each library load until libtorch is attached, so
  // its first op is seen (the probe is on the dynamic loader's hook).
  std::optional<Loader> loader = FindLoader(getpid());
  if (!loader) return Status::Error("cannot find torchprobe's own dynamic loader (" + std::string(kLoader) + ")");
  Status status = launcher_.Fork(command);
  if (!status.ok()) return status;
  Add(static_cast<uint32_t>(launcher_.pid()), "");
  context_.bpf->SetLoads(LOADS_HOLD);
  StatusOr<ProbeLinks> links = WatchLoader(*loader, -1);
  if (!links.ok()) return links.status();
  launch_links_.push_back(std::move(*links));
  launch_loaders_.insert(loader->identity);
  return launcher_.Release();
}

Status TargetTracker::AttachNamed(const std::vector<uint32_t>& pids) {
  for (uint32_t pid : pids) {
    Target& t = Add(pid, "");
    if (!options_.wait && !IsProcessAlive(pid))
      return Status::Error("process " + std::to_string(pid) + " exited before it could be attached");
    Status status = Attach(t);
    if (status.ok() && !options_.wait && ops_->TorchOf(pid).empty())
      status = Status::Error("process " + std::to_string(pid) + " exited before it could be attached");
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

void TargetTracker::AdoptChildren(const std::vector<uint32_t>& pids) {
  if (!options_.follow_children) return;
  for (uint32_t pid : pids)
    for (uint32_t child : ListDescendants(pid))
      if (!targets_.count(child)) Add(child, "child of " + std::to_string(ReadParentPid(child))).attach_pending = true;
}

void TargetTracker::OnLaunchExec(uint32_t pid) {
  // A program run through another dynamic loader (a chroot's, a container's)
  // loads libtorch through that one: watch it too.
  std::optional<Loader> loader = FindLoader(pid);
  if (!loader || !launch_loaders_.insert(loader->identity).second) return;
  StatusOr<ProbeLinks> links = WatchLoader(*loader, -1);
  if (links.ok()) launch_links_.push_back(std::move(*links));
}

void TargetTracker::ResumeHeld() {
  for (uint32_t pid : pending_loads_) {
    kill(static_cast<pid_t>(pid), SIGCONT);  // always: never leave a target stopped
    context_.bpf->Unhold(pid);
  }
  pending_loads_.clear();
}

Status TargetTracker::HandleEvents() {
  Status result = Status::Ok();
  auto keep_first_error = [&result](const Status& status) {
    if (result.ok() && !status.ok()) result = status;
  };
  std::vector<ForkEvent> forks;
  forks.swap(pending_forks_);
  for (const ForkEvent& fork : forks) {
    Target& t = Add(fork.child, "child of " + std::to_string(fork.parent));
    if (!fork.held) {
      t.forked_ns = fork.ts_ns;  // running untraced until attached: measured then
      t.attach_pending = true;   // next turn: most fork+exec children have exec'd by then
      continue;
    }
    // Held stopped at its fork: attached now, then let go, so its first op
    // is traced (and not attached twice: it cannot have exec'd).
    if (result.ok()) keep_first_error(Attach(t));
    kill(static_cast<pid_t>(fork.child), SIGCONT);  // always: never leave a process stopped
    context_.bpf->Unhold(fork.child);
    ++stats_().children_held;
    stats_().children_held_ns += NowNs() - fork.ts_ns;
  }
  std::vector<uint32_t> execs;
  execs.swap(pending_execs_);
  for (uint32_t pid : execs) {
    if (options_.launch) OnLaunchExec(pid);
    auto it = targets_.find(pid);
    if (it == targets_.end()) continue;
    // The old program's images are gone with it; its loader watch (a link
    // on the process) goes on.
    ReleaseImages(it->second);
    it->second.attach_pending = true;
    // Launched, it is held at its exec until attached: the new program has
    // missed nothing (a vfork'd child, not held at its fork, ran nothing).
    if (options_.launch) it->second.forked_ns = 0;
  }
  for (uint32_t pid : pending_loads_) {
    auto it = targets_.find(pid);
    if (it == targets_.end()) continue;
    // Launched: held at the load, attached now (libtorch once, then the
    // other images; its loads stop holding it once its libtorch is attached).
    if (options_.launch && result.ok()) keep_first_error(Attach(it->second));
    if (!options_.launch) it->second.attach_pending = true;
  }
  if (options_.launch) ResumeHeld();
  pending_loads_.clear();
  for (auto& [pid, t] : targets_) {
    if (!t.attach_pending || t.exited || !result.ok()) continue;
    t.attach_pending = false;
    keep_first_error(Attach(t));
  }
  return result;
}

void TargetTracker::OnProcEvent(const tp_proc_event& event) {
  switch (event.hdr.type) {
    case EV_PROC_EXIT:
      // Its last op events may still be in the op ring: applied by the
      // session once the ring is drained (TakeExits).
      pending_exits_.push_back(event);
      break;
    case EV_PROC_FORK:
      pending_forks_.push_back({event.hdr.pid, event.child_pid, event.child_held != 0, event.hdr.ts_ns});
      // One of the run's from its fork on, said now: its first GPU records
      // may be on their way before the next turn makes it a target.
      for (auto& set : *sets_) set->Follow(event.child_pid, event.hdr.ts_ns);
      break;
    case EV_PROC_EXEC:
      pending_execs_.push_back(event.hdr.pid);
      // Launched, it may be held at its exec (on_exec): resumed with the
      // loads, once its loader is watched.
      if (options_.launch) pending_loads_.push_back(event.hdr.pid);
      break;
    case EV_LIB_LOAD:
      pending_loads_.push_back(event.hdr.pid);
      break;
  }
}

std::vector<tp_proc_event> TargetTracker::TakeExits() {
  std::vector<tp_proc_event> exits;
  exits.swap(pending_exits_);
  return exits;
}

void TargetTracker::Exited(uint32_t pid) {
  auto it = targets_.find(pid);
  if (it == targets_.end()) return;
  it->second.exited = true;
  Release(it->second);  // nothing left to unpatch: fast
}

bool TargetTracker::Alive() {
  if (options_.launch && command_status_ < 0 && !launcher_.Exited(&command_status_)) return true;
  bool alive = false;
  for (auto& [pid, t] : targets_) {
    if (t.exited) continue;
    if (IsProcessAlive(pid)) {
      alive = true;
      continue;
    }
    t.exited = true;
    context_.bpf->RemovePid(pid);
    Release(t);
  }
  return alive;
}

void TargetTracker::StopHolding() {
  context_.bpf->SetLoads(LOADS_IGNORE);
  // A launched command stopped at a library load must go on, as must a
  // child held at a fork whose event was not handled.
  ResumeHeld();
  for (uint32_t pid : context_.bpf->Held()) {
    kill(static_cast<pid_t>(pid), SIGCONT);
    context_.bpf->Unhold(pid);
  }
}

void TargetTracker::Clear() {
  targets_.clear();
  launch_links_.clear();
}

int TargetTracker::WaitForCommand(StatusLine& status_line) {
  if (command_status_ < 0) {
    int stops = StopSignals();
    std::string text = "tracing stopped; waiting for the command (pid " + std::to_string(launcher_.pid()) + ") to exit";
    while (!launcher_.Exited(&command_status_)) {
      if (StopSignals() != stops) {
        status_line.Clear();
        std::fprintf(stderr, "torchprobe: not waiting for the command any longer: it goes on as pid %d\n",
                     launcher_.pid());
        return 128 + SIGINT;
      }
      status_line.Show(NowNs(), text);
      usleep(20'000);
    }
    status_line.Clear();
  }
  if (WIFEXITED(command_status_)) return WEXITSTATUS(command_status_);
  if (WIFSIGNALED(command_status_)) return 128 + WTERMSIG(command_status_);
  return 1;
}

std::string TargetTracker::why_untraced_children() const {
  return context_.bpf->holds_forks() ? "attached by pid, a vfork'd child is not held until it has exec'd"
                                     : "holding a child at its fork needs Linux 6.13+";
}

}  // namespace torchprobe
