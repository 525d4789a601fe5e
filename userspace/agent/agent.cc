// The agent's loop: one thread, poll() on its signals, the trigger socket and
// the metrics port, with a timer for /proc walks and the window schedule.
//
// Discovery: a process becomes a target when it maps libtorch_cpu.so, an
// `import torch` that may come long after its exec, through whichever loader
// its container ships. An exec event (discovery_events.h) names each new
// program, whose maps the agent reads a few times as it starts (50 ms to 3 s
// after). The /proc walk every --scan seconds (1 by default) does the rest:
// processes running before the agent, imports later than that (no hook on
// library loads loads here: see bpf/agent.bpf.c), a kernel where the exec
// program cannot load, an event lost to a full ring. It sees every process of
// every namespace and costs a few ms per walk.
#include "userspace/agent/agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "userspace/agent/agent_metrics.h"
#include "userspace/agent/discovery_events.h"
#include "userspace/agent/duty_budget.h"
#include "userspace/agent/keeper_reaper.h"
#include "userspace/agent/trigger_socket.h"
#include "userspace/agent/window_child.h"
#include "userspace/agent/window_store.h"
#include "userspace/clock.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

void Log(const std::string& line) { std::fprintf(stderr, "torchprobe agent: %s\n", line.c_str()); }

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string host = name[0] ? name : "localhost";
  for (char& c : host)
    if (c == '/' || c == ' ') c = '_';
  return host;
}

struct Target {
  TargetInfo info;
  DutyBudget budget;
  uint64_t next_at_ns = 0;       // CLOCK_MONOTONIC: the next scheduled window
  pid_t window = 0;              // the record child running its window, 0 for none
  std::vector<int> waiting;      // trigger clients waiting for a window to start after this one
  std::vector<double> waiting_s; // ... and the durations they asked for
};

struct RunningWindow {
  uint32_t target = 0;
  std::string partial;
  std::string log;
  WindowEntry entry;
  std::vector<int> clients;  // trigger clients to answer when it is written
};

class Agent {
 public:
  explicit Agent(const AgentOptions& options) : options_(options), host_(HostName()) {}
  int Run();

 private:
  bool Start();
  void Scan();
  // A process that exec'd: a target if it maps libtorch now and passes the filters.
  bool Check(uint32_t pid);
  void AddTarget(const TargetInfo& info, const char* how);
  void TakeEvents();
  void Schedule();
  void StartWindow(Target& target, double duration_s, bool triggered, std::vector<int> clients);
  void Reap();
  void FinishWindow(pid_t child, int status);
  void HandleTrigger();
  void Stop();
  void UpdateGauges();
  std::string Tail(const std::string& log);

  AgentOptions options_;
  std::string host_;
  WindowStore store_;
  TriggerServer trigger_;
  MetricsServer metrics_;
  DiscoveryEvents events_;
  bool events_on_ = false;
  struct Recheck {
    uint64_t at_ns;  // CLOCK_MONOTONIC
    size_t done;     // checks so far
  };
  std::map<uint32_t, Recheck> rechecks_;  // exec'd pids still to look at
  AgentCounters counters_;
  int signals_ = -1;
  bool stopping_ = false;
  std::map<uint32_t, std::unique_ptr<Target>> targets_;
  std::map<pid_t, RunningWindow> windows_;
  KeeperReaper keepers_;  // of past windows, still removing probes
  uint64_t departed_cpu_ns_ = 0;  // CPU time of targets that have exited, while sampled
};

bool Agent::Start() {
  // Signals first: a SIGTERM during start-up is a stop like any other.
  sigset_t mask;
  sigemptyset(&mask);
  for (int signal : {SIGTERM, SIGINT, SIGCHLD, SIGHUP}) sigaddset(&mask, signal);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signals_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  std::string error;
  if (!KeeperReaper::BecomeSubreaper(&error) || !store_.Open(options_.dir, options_.max_bytes, options_.max_files, &error) ||
      !trigger_.Listen(options_.socket, &error) ||
      (!options_.metrics.empty() && !metrics_.Listen(options_.metrics, &error))) {
    Log(error);
    return false;
  }
  std::string why;
  events_on_ = events_.Start(&why);
  char scan[32];
  std::snprintf(scan, sizeof scan, "%.3g", options_.scan_s);
  Log(events_on_ ? std::string("new processes found by exec events and by walking /proc every ") + scan + " s"
                 : "exec events unavailable (" + why + "): new processes found by walking /proc every " + scan + " s");
  char line[512];
  std::string budget = options_.budget_pct > 0 ? std::to_string(options_.budget_pct) + "%" : "none";
  std::snprintf(line, sizeof line, "windows of %.3g s every %.3g s, budget %s, into %s (%zu kept); trigger socket %s%s%s",
                options_.window_s, options_.every_s, budget.c_str(), options_.dir.c_str(),
                store_.entries().size(), options_.socket.c_str(), metrics_.fd() >= 0 ? "; metrics on " : "",
                metrics_.bound().c_str());
  Log(line);
  return true;
}

void Agent::Scan() {
  std::vector<TargetInfo> found = ScanTargets(options_.filter);
  std::map<uint32_t, bool> alive;
  for (TargetInfo& info : found) {
    alive[info.pid] = true;
    auto it = targets_.find(info.pid);
    if (it != targets_.end() && it->second->info.start_ticks != info.start_ticks && !it->second->window) {
      targets_.erase(it);  // the pid was reused
      it = targets_.end();
    }
    if (it == targets_.end()) AddTarget(info, "/proc walk");
  }
  for (auto it = targets_.begin(); it != targets_.end();) {
    Target& target = *it->second;
    uint64_t cpu = ProcessCpuNs(target.info.pid);
    if (cpu) target.budget.ObserveCpu(cpu);
    // A target that no longer passes (gone, or unmapped libtorch) is dropped
    // once its window is over.
    if (!alive.count(it->first) && !target.window) {
      Log("pid " + std::to_string(it->first) + " is gone");
      departed_cpu_ns_ += target.budget.cpu_ns();
      for (int client : target.waiting) TriggerServer::Reply(client, "error pid " + std::to_string(it->first) + " exited");
      it = targets_.erase(it);
    } else {
      ++it;
    }
  }
}

void Agent::AddTarget(const TargetInfo& info, const char* how) {
  ++counters_.targets_found;
  Log("found pid " + std::to_string(info.pid) + " (" + info.comm + (info.rank.empty() ? "" : ", rank " + info.rank) +
      (info.container.empty() ? "" : ", container " + info.container.substr(0, 12)) + ", cgroup " + info.cgroup +
      "; by " + how + ")");
  targets_[info.pid] = std::make_unique<Target>(Target{info, DutyBudget(options_.budget_pct / 100), NowNs(), 0, {}, {}});
}

bool Agent::Check(uint32_t pid) {
  if (targets_.count(pid)) return true;
  const std::vector<uint32_t>& only = options_.filter.pids;
  if (!only.empty() && std::find(only.begin(), only.end(), pid) == only.end()) return true;  // never ours
  TargetFilter filter = options_.filter;
  filter.pids = {pid};
  std::vector<TargetInfo> found = ScanTargets(filter);
  if (found.empty()) return false;
  AddTarget(found[0], "exec event");
  return true;
}

void Agent::TakeEvents() {
  // At the exec event the new program's loader has not run yet: its maps are
  // read 50 ms, 200 ms, 1 s and 3 s later (a program linked to libtorch, a
  // script that imports torch first thing); a later import is the walk's.
  static constexpr uint64_t kAfterNs[] = {50'000'000, 200'000'000, 1'000'000'000, 3'000'000'000};
  std::vector<uint32_t> execs;
  events_.Take(&execs);
  uint64_t now = NowNs();
  for (uint32_t pid : execs) rechecks_[pid] = Recheck{now + kAfterNs[0], 0};
  for (auto it = rechecks_.begin(); it != rechecks_.end();) {
    Recheck& r = it->second;
    if (now < r.at_ns) {
      ++it;
    } else if (Check(it->first) || ++r.done == std::size(kAfterNs)) {
      it = rechecks_.erase(it);
    } else {
      r.at_ns += kAfterNs[r.done] - kAfterNs[r.done - 1];
      ++it;
    }
  }
}

void Agent::Schedule() {
  uint64_t now = NowNs();
  for (auto& [pid, target] : targets_) {
    if (now < target->next_at_ns) continue;
    target->next_at_ns = now + static_cast<uint64_t>(options_.every_s * 1e9);
    if (target->window || !target->budget.Allows()) {
      ++counters_.windows_skipped;
      continue;
    }
    pid_t keeper = 0;
    bool first = false;
    if (keepers_.Removing(pid, &keeper, &first)) {
      ++counters_.windows_skipped;
      ++counters_.windows_skipped_removing;
      if (first)
        Log("pid " + std::to_string(pid) + ": no window while the keeper of its last one (pid " +
            std::to_string(keeper) + ") removes that window's probes (per-symbol uprobes come off ~10 a second)");
      continue;
    }
    StartWindow(*target, options_.window_s, false, {});
  }
}

void Agent::StartWindow(Target& target, double duration_s, bool triggered, std::vector<int> clients) {
  RunningWindow window;
  window.target = target.info.pid;
  window.entry.host = host_;
  window.entry.target = target.info;
  window.entry.start_unix_ns = NowNs(CLOCK_REALTIME);
  window.entry.duration_s = duration_s;
  window.entry.triggered = triggered;
  window.partial = store_.PartialPath(host_, target.info, window.entry.start_unix_ns, &window.entry.file);
  window.log = window.partial + ".log";
  window.clients = std::move(clients);
  std::string error;
  pid_t child = torchprobe::StartWindow(
      {target.info.pid, duration_s, window.partial, window.log, options_.plan_cache, options_.attach}, &error);
  if (child < 0) {
    Log(error);
    ++counters_.windows_failed;
    for (int client : window.clients) TriggerServer::Reply(client, "error " + error);
    return;
  }
  target.window = child;
  Log(std::string(triggered ? "triggered" : "scheduled") + " window on pid " + std::to_string(target.info.pid) +
      " (record pid " + std::to_string(child) + ")");
  windows_[child] = std::move(window);
}

std::string Agent::Tail(const std::string& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last.empty() ? "no message" : last;
}

void Agent::FinishWindow(pid_t child, int status) {
  auto it = windows_.find(child);
  if (it == windows_.end()) return;
  RunningWindow window = std::move(it->second);
  windows_.erase(it);
  auto target_it = targets_.find(window.target);
  Target* target = target_it == targets_.end() ? nullptr : target_it->second.get();
  if (target) target->window = 0;
  DecodedTrace trace;
  std::string error;
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && ReadTrace(window.partial, &trace, &error);
  if (!ok) {
    std::string why = WIFSIGNALED(status) ? "record killed by signal " + std::to_string(WTERMSIG(status))
                                          : error.empty() ? Tail(window.log) : error;
    ++counters_.windows_failed;
    bool alive = target && ProcessStartTicks(window.target) == target->info.start_ticks;
    if (alive && !stopping_) ++counters_.attach_failures;
    Log("no window for pid " + std::to_string(window.target) + (alive ? ": " : " (it exited): ") + why);
    for (int client : window.clients) TriggerServer::Reply(client, "error " + why);
    unlink(window.partial.c_str());
  } else {
    WindowCost cost{trace.stats.attach_ns, DetachNsFromLog(window.log), trace.stats.op_slices,
                    trace.stats.probe_ns_per_op};
    window.entry.events = trace.stats.events;
    window.entry.dropped = trace.stats.dropped_events;
    window.entry.attach_ns = trace.stats.attach_ns;
    window.entry.detach_ns = cost.detach_ns;
    window.entry.cost_ns = cost.total_ns();
    if (target) target->budget.Charge(cost.total_ns());
    counters_.cost_ns += cost.total_ns();
    if (!store_.Commit(window.partial, &window.entry, &error)) {
      ++counters_.windows_failed;
      Log(error);
      for (int client : window.clients) TriggerServer::Reply(client, "error " + error);
    } else {
      ++counters_.windows_taken;
      counters_.events += window.entry.events;
      counters_.dropped_events += window.entry.dropped;
      counters_.bytes_written += window.entry.bytes;
      char line[512];
      std::snprintf(line, sizeof line, "window %s: %llu events, %llu dropped, attach %.1f ms, detach %.1f ms, cost %.1f ms",
                    window.entry.file.c_str(), (unsigned long long)window.entry.events,
                    (unsigned long long)window.entry.dropped, window.entry.attach_ns / 1e6,
                    window.entry.detach_ns / 1e6, window.entry.cost_ns / 1e6);
      Log(line);
      for (int client : window.clients) TriggerServer::Reply(client, "ok " + store_.dir() + "/" + window.entry.file);
    }
  }
  unlink(window.log.c_str());
  UpdateGauges();
  Log(MetricsLogLine(counters_));
  // Triggers that came while this window ran get theirs now.
  if (target && !target->waiting.empty() && !stopping_) {
    double longest = 0;
    for (double s : target->waiting_s) longest = std::max(longest, s);
    std::vector<int> clients = std::move(target->waiting);
    target->waiting.clear();
    target->waiting_s.clear();
    StartWindow(*target, longest, true, std::move(clients));
  }
}

void Agent::Reap() {
  for (;;) {
    int status = 0;
    pid_t child = waitpid(-1, &status, WNOHANG);
    if (child <= 0) return;
    if (keepers_.Reaped(child)) continue;
    keepers_.Adopt();  // the window's keeper, if it left one, is ours now
    FinishWindow(child, status);
  }
}

void Agent::HandleTrigger() {
  TriggerRequest request;
  int client = trigger_.Accept(&request);
  if (client < 0) return;
  if (stopping_) return TriggerServer::Reply(client, "error the agent is stopping");
  auto it = targets_.find(request.pid);
  if (it == targets_.end()) {
    // Not found yet (or left out by the filters): a trigger names it, so it
    // is taken if it maps libtorch.
    TargetFilter only;
    only.pids = {request.pid};
    std::vector<TargetInfo> found = ScanTargets(only);
    if (found.empty())
      return TriggerServer::Reply(client, "error pid " + std::to_string(request.pid) + " is not a PyTorch process (no libtorch_cpu.so mapped)");
    ++counters_.targets_found;
    it = targets_.emplace(request.pid, std::make_unique<Target>(Target{found[0], DutyBudget(options_.budget_pct / 100),
                                                                      NowNs() + static_cast<uint64_t>(options_.every_s * 1e9), 0, {}, {}})).first;
  }
  Target& target = *it->second;
  if (target.window) {
    target.waiting.push_back(client);
    target.waiting_s.push_back(request.duration_s);
    return;
  }
  StartWindow(target, request.duration_s, true, {client});
}

void Agent::UpdateGauges() {
  counters_.targets = targets_.size();
  counters_.files = store_.entries().size();
  counters_.bytes_on_disk = store_.bytes();
  counters_.files_removed = store_.files_removed();
  counters_.keepers = keepers_.count();
  uint64_t cpu = departed_cpu_ns_;
  for (auto& [pid, target] : targets_) cpu += target->budget.cpu_ns();
  counters_.target_cpu_ns = cpu;
}

void Agent::Stop() {
  // Each running window ends now and is written (record stops on SIGTERM and
  // writes what it has); bounded, so that a stuck child cannot hold the agent.
  for (auto& [child, window] : windows_) kill(child, SIGTERM);
  uint64_t deadline = NowNs() + 30'000'000'000ull;
  while (!windows_.empty() && NowNs() < deadline) {
    Reap();
    if (!windows_.empty()) usleep(20'000);
  }
  for (auto& [child, window] : windows_) {
    kill(child, SIGKILL);
    for (int client : window.clients) TriggerServer::Reply(client, "error the agent stopped");
  }
  for (auto& [pid, target] : targets_)
    for (int client : target->waiting) TriggerServer::Reply(client, "error the agent stopped");
  if (size_t left = keepers_.Finish(KeeperReaper::kStopWaitS))
    Log(std::to_string(left) + " keepers still removing probes after " + std::to_string(KeeperReaper::kStopWaitS) +
        " s: the agent exits without them");
  UpdateGauges();
  Log("stopped: " + MetricsLogLine(counters_));
}

int Agent::Run() {
  if (!Start()) return 1;
  uint64_t next_scan = 0;
  while (!stopping_) {
    uint64_t now = NowNs();
    if (now >= next_scan) {
      Scan();
      UpdateGauges();
      next_scan = now + static_cast<uint64_t>(options_.scan_s * 1e9);
    }
    Schedule();
    pollfd fds[4] = {{signals_, POLLIN, 0}, {trigger_.fd(), POLLIN, 0}, {events_.fd(), POLLIN, 0},
                     {metrics_.fd(), POLLIN, 0}};
    int timeout_ms = static_cast<int>(std::min<uint64_t>((next_scan - std::min(next_scan, NowNs())) / 1'000'000,
                                                         rechecks_.empty() ? 100 : 20));
    if (poll(fds, metrics_.fd() >= 0 ? 4 : 3, timeout_ms) < 0 && errno != EINTR) break;
    if ((fds[2].revents & POLLIN) || !rechecks_.empty()) TakeEvents();
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(signals_, &info, sizeof info) == sizeof info)
        if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) stopping_ = true;
      Reap();
    }
    if (fds[1].revents & POLLIN) HandleTrigger();
    if (metrics_.fd() >= 0 && (fds[3].revents & POLLIN)) {
      UpdateGauges();
      metrics_.Answer(MetricsText(counters_));
    }
  }
  Stop();
  return 0;
}

}  // namespace

int RunAgent(const AgentOptions& options) {
  Agent agent(options);
  return agent.Run();
}

}  // namespace torchprobe
