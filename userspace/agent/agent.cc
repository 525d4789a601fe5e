// The agent's loop: one thread, poll() on its signals, the trigger socket and
// the metrics port (each client a non-blocking connection with its own
// deadline: request_server.h), with a timer for /proc walks and the window
// schedule. Nothing a local user sends or runs can make it wait: clients are
// read as their bytes arrive, targets' text is bounded and never parsed by
// anything that recurses or throws, and a window's record that runs far past
// its window (a target file that stalls its reads) is stopped.
//
// Bounds: at most --max-targets processes are sampled (more are counted as
// left out) and at most --max-windows records run at once (a due window
// waits for one to end, counted once as capped).
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

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "userspace/agent/agent_metrics.h"
#include "userspace/agent/discovery_events.h"
#include "userspace/agent/duty_budget.h"
#include "userspace/agent/flight_dumps.h"
#include "userspace/agent/keeper_reaper.h"
#include "userspace/agent/target_text.h"
#include "userspace/agent/trigger_socket.h"
#include "userspace/agent/window_child.h"
#include "userspace/agent/window_digest.h"
#include "userspace/agent/window_name.h"
#include "userspace/agent/window_store.h"
#include "userspace/base/atomic_file.h"
#include "userspace/base/clock.h"
#include "userspace/base/counted.h"
#include "userspace/base/host_name.h"
#include "userspace/discover/probe_plan_cache.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

constexpr uint64_t kOverdueNs = 120'000'000'000;  // a record this far past its window is stopped
constexpr uint64_t kKillAfterNs = 10'000'000'000; // ... and killed this long after SIGTERM

// Every line the agent logs passes here: one printable line, bounded,
// whatever target text it carries (target_text.h).
void Log(const std::string& line) {
  std::fprintf(stderr, "torchprobe agent: %s\n", LogSafe(line, 4096).c_str());
}

struct Target {
  TargetInfo info;
  DutyBudget budget;
  uint64_t next_at_ns = 0;       // CLOCK_MONOTONIC: the next scheduled window
  pid_t window = 0;              // the record child running its window, 0 for none
  bool capped = false;           // its due window waits for one of --max-windows (counted once)
  std::vector<int> waiting;      // trigger clients waiting for a window to start
  std::vector<double> waiting_s; // ... and the durations they asked for
  TargetWindows windows_written; // what its last window showed (metrics)
  pid_t flight = 0;              // its flight recorder's record child, 0 for none
  bool flight_failed = false;    // its flight recorder could not run: not started again
  std::vector<int> dump_waiting; // trigger --dump clients waiting for its next dump
  uint64_t dumps = 0;            // dumps of it indexed
};

struct RunningWindow {
  uint32_t target = 0;
  std::string log;           // record's log: a name in the store's .partial
  WindowEntry entry;         // entry.file: the window's name in .partial, then in DIR
  std::vector<int> clients;  // trigger clients to answer when it is written
  uint64_t deadline_ns = 0;  // CLOCK_MONOTONIC: past it the record is stopped (then killed)
  bool stopped = false;      // SIGTERM sent for being overdue
};

class Agent {
 public:
  explicit Agent(const AgentOptions& options) : options_(options), host_(HostName()) {}
  int Run();

 private:
  bool Start();
  void Scan();
  // A process that exec'd: true once it needs no more looks (taken, or left out).
  bool Check(uint32_t pid);
  void AddTarget(const TargetInfo& info, const char* how, uint64_t next_at_ns);
  // When a window due at `not_before` (CLOCK_MONOTONIC) starts: then, or
  // with --align at the next wall-clock multiple of it.
  uint64_t NextWindowAt(uint64_t not_before) const;
  void TakeEvents();
  void Schedule();
  void StartWindow(Target& target, double duration_s, bool triggered, std::vector<int> clients);
  void Reap();
  void FinishWindow(pid_t child, int status, uint64_t cpu_ns);
  void StopOverdue();
  void HandleTrigger(const Request& request);
  // The flight recorder (--flight-recorder): one record child per target,
  // its dumps indexed as they appear, its end.
  void StartFlight(Target& target);
  void CollectDumps();
  void FinishFlight(pid_t child, int status);
  void StopFlights();
  void Reply(int client, const std::string& line) { trigger_.Reply(client, line, NowNs()); }
  void Stop();
  void UpdateGauges();
  int PollTimeoutMs(uint64_t next_scan);
  // What a window is expected to cost its target here (duty_budget.h): the
  // most any of the last 8 windows written cost, of any target. The most,
  // not the median: a window that costs more than expected is what would
  // take the duty cycle past the budget.
  uint64_t ExpectedCostNs() const;

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
  std::map<pid_t, uint32_t> flights_;  // flight recorder children -> their target's pid
  KeeperReaper keepers_;  // of past windows, still removing probes
  uint64_t departed_cpu_ns_ = 0;  // CPU time of targets that have exited, while sampled
  std::deque<uint64_t> recent_costs_;  // the last windows' costs
};

uint64_t Agent::ExpectedCostNs() const {
  if (recent_costs_.empty()) return kFirstWindowPriorNs;
  return *std::max_element(recent_costs_.begin(), recent_costs_.end());
}

bool Agent::Start() {
  // Signals first: a SIGTERM during start-up is a stop like any other.
  sigset_t mask;
  sigemptyset(&mask);
  for (int signal : {SIGTERM, SIGINT, SIGCHLD, SIGHUP}) sigaddset(&mask, signal);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signals_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  SetOutputFileMode(options_.mode);
  std::string error, note;
  if (!KeeperReaper::BecomeSubreaper(&error) ||
      (!options_.plan_cache.empty() && !PreparePlanCacheDir(options_.plan_cache, &error)) ||
      !store_.Open(options_.dir, options_.max_bytes, options_.max_files, &error, &note) ||
      !trigger_.Listen(options_.socket, &error) ||
      (!options_.metrics.empty() && !metrics_.Listen(options_.metrics, options_.metrics_any_address, &error))) {
    Log(error);
    return false;
  }
  if (!note.empty()) Log(note);
  std::string why;
  events_on_ = events_.Start(&why);
  char scan[32];
  std::snprintf(scan, sizeof scan, "%.3g", options_.scan_s);
  Log(events_on_ ? std::string("new processes found by exec events and by walking /proc every ") + scan + " s"
                 : "exec events unavailable (" + why + "): new processes found by walking /proc every " + scan + " s");
  char align[64] = "";
  if (options_.align_s > 0) std::snprintf(align, sizeof align, " at wall-clock multiples of %.3g s", options_.align_s);
  std::string aligned = align;
  char line[768];
  char percent[32];
  std::snprintf(percent, sizeof percent, "%.3g%%", options_.budget_pct);
  std::string budget = options_.budget_pct > 0 ? percent : "none";
  std::snprintf(line, sizeof line,
                "windows of %.3g s every %.3g s%s, budget %s, at most %zu targets and %zu windows at once, into %s "
                "(%zu kept, mode %04o); plan cache %s; trigger socket %s%s%s",
                options_.window_s, options_.every_s,
                aligned.c_str(),
                budget.c_str(), options_.max_targets, options_.max_windows,
                options_.dir.c_str(), store_.entries().size(), static_cast<unsigned>(options_.mode),
                options_.plan_cache.empty() ? "off" : options_.plan_cache.c_str(), options_.socket.c_str(),
                metrics_.bound().empty() ? "" : "; metrics on ", metrics_.bound().c_str());
  Log(line);
  if (options_.flight.seconds > 0) {
    std::snprintf(line, sizeof line, "flight recorder on every target: the last %.3g s, %s tier, up to %llu MB each%s%s",
                  options_.flight.seconds, options_.flight.light ? "light" : "full",
                  static_cast<unsigned long long>(options_.flight.bytes >> 20),
                  options_.dump_at_stop ? "; a dump of each at stop" : "", options_.windows ? "" : "; no windows");
    Log(line);
  }
  return true;
}

void Agent::Scan() {
  size_t room = options_.max_targets > targets_.size() ? options_.max_targets - targets_.size() : 0;
  size_t left_out = 0;
  std::vector<TargetInfo> found = ScanTargets(
      options_.filter,
      [&](uint32_t pid, uint64_t start) {
        auto it = targets_.find(pid);
        return it != targets_.end() && it->second->info.start_ticks == start;
      },
      room, &left_out);
  if ((left_out > 0) != (counters_.targets_left_out > 0))
    Log(left_out ? Counted(left_out, "process", "processes") + " left out: --max-targets (" +
                       std::to_string(options_.max_targets) + ") reached"
                 : "no process left out by --max-targets any more");
  counters_.targets_left_out = left_out;
  std::map<uint32_t, bool> alive;
  for (TargetInfo& info : found) {
    alive[info.pid] = true;
    auto it = targets_.find(info.pid);
    if (it != targets_.end() && it->second->info.start_ticks == info.start_ticks) continue;
    if (it != targets_.end()) {
      if (it->second->window) continue;  // the pid was reused: taken once its old window is over
      targets_.erase(it);
    }
    AddTarget(info, "/proc walk", NextWindowAt(NowNs()));
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
      for (int client : target.waiting) Reply(client, "error pid " + std::to_string(it->first) + " exited");
      it = targets_.erase(it);
    } else {
      ++it;
    }
  }
}

void Agent::AddTarget(const TargetInfo& info, const char* how, uint64_t next_at_ns) {
  ++counters_.targets_found;
  Log("found pid " + std::to_string(info.pid) + " (" + info.comm + (info.rank.empty() ? "" : ", rank " + info.rank) +
      (info.container.empty() ? "" : ", container " + info.container.substr(0, 12)) + ", cgroup " + info.cgroup +
      "; by " + how + ")");
  auto target = std::make_unique<Target>(
      Target{info, DutyBudget(options_.budget_pct / 100), next_at_ns, 0, false, {}, {}, {}, 0, false, {}, 0});
  target->info.job = JobOf(info.pid, options_.job_env);
  targets_[info.pid] = std::move(target);
}

bool Agent::Check(uint32_t pid) {
  if (targets_.count(pid)) return true;
  const std::vector<uint32_t>& only = options_.filter.pids;
  if (!only.empty() && std::find(only.begin(), only.end(), pid) == only.end()) return true;  // never ours
  TargetFilter filter = options_.filter;
  filter.pids = {pid};
  size_t left_out = 0;
  std::vector<TargetInfo> found = ScanTargets(filter, nullptr, targets_.size() < options_.max_targets, &left_out);
  if (!found.empty()) AddTarget(found[0], "exec event", NextWindowAt(NowNs()));
  return !found.empty() || left_out;  // one left out is counted by the walks
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
  if (stopping_) return;
  uint64_t now = NowNs();
  // Triggered windows first: asked for now, outside the budget.
  for (auto& [pid, target] : targets_) {
    if (target->waiting.empty() || target->window || windows_.size() >= options_.max_windows) continue;
    double longest = *std::max_element(target->waiting_s.begin(), target->waiting_s.end());
    std::vector<int> clients = std::move(target->waiting);
    target->waiting.clear();
    target->waiting_s.clear();
    StartWindow(*target, longest, true, std::move(clients));
  }
  for (auto& [pid, target] : targets_) {
    if (options_.flight.seconds > 0 && !target->flight && !target->flight_failed && !stopping_) StartFlight(*target);
    if (!options_.windows) continue;  // the flight recorder only (triggered windows are still taken)
    if (now < target->next_at_ns) continue;
    if (target->window || !target->budget.Allows(ExpectedCostNs())) {
      target->next_at_ns = NextWindowAt(now + static_cast<uint64_t>(options_.every_s * 1e9));
      ++counters_.windows_skipped;
      continue;
    }
    pid_t keeper = 0;
    bool first = false;
    if (keepers_.Removing(pid, &keeper, &first)) {
      target->next_at_ns = NextWindowAt(now + static_cast<uint64_t>(options_.every_s * 1e9));
      ++counters_.windows_skipped;
      ++counters_.windows_skipped_removing;
      if (first)
        Log("pid " + std::to_string(pid) + ": no window while the keeper of its last one (pid " +
            std::to_string(keeper) + ") removes that window's probes (per-symbol uprobes come off ~10 a second)");
      continue;
    }
    if (windows_.size() >= options_.max_windows) {  // stays due: taken when a record ends
      if (!target->capped) ++counters_.windows_capped;
      target->capped = true;
      continue;
    }
    target->capped = false;
    target->next_at_ns = NextWindowAt(now + static_cast<uint64_t>(options_.every_s * 1e9));
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
  window.entry.file = store_.NewName(host_, target.info, window.entry.start_unix_ns);
  window.log = window.entry.file + ".log";
  window.clients = std::move(clients);
  window.deadline_ns = NowNs() + static_cast<uint64_t>(duration_s * 1e9) + kOverdueNs;
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(options_.mode));
  std::string error;
  for (const std::string& suffix : options_.contents.CompanionSuffixes())
    window.entry.companions.push_back(CompanionName(window.entry.file, suffix));
  pid_t child = torchprobe::StartWindow(
      {target.info.pid, duration_s, store_.partial_fd(), window.entry.file, window.log, options_.plan_cache, mode,
       options_.attach, options_.contents, {}},
      &error);
  if (child < 0) {
    Log(error);
    ++counters_.windows_failed;
    for (int client : window.clients) Reply(client, "error " + error);
    return;
  }
  target.window = child;
  Log(std::string(triggered ? "triggered" : "scheduled") + " window on pid " + std::to_string(target.info.pid) +
      " (record pid " + std::to_string(child) + ")");
  windows_[child] = std::move(window);
}

void Agent::FinishWindow(pid_t child, int status, uint64_t cpu_ns) {
  auto it = windows_.find(child);
  if (it == windows_.end()) return;
  RunningWindow window = std::move(it->second);
  windows_.erase(it);
  auto target_it = targets_.find(window.target);
  Target* target = target_it == targets_.end() ? nullptr : target_it->second.get();
  if (target) target->window = 0;
  WindowLog log = ReadWindowLog(store_.PartialPath(window.log));
  counters_.plan_cache_rejected += log.plan_cache_rejected;
  DecodedTrace trace;
  std::string error;
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
            ReadTrace(store_.PartialPath(window.entry.file), &trace, &error);
  if (!ok) {
    std::string why = window.stopped          ? "record ran " + std::to_string(kOverdueNs / 1'000'000'000) +
                                                    " s past its window and was stopped"
                      : WIFSIGNALED(status) ? "record killed by signal " + std::to_string(WTERMSIG(status))
                      : error.empty()       ? log.last_line
                                            : error;
    ++counters_.windows_failed;
    // Not free to repeat (duty_budget.h): charged what its record cost.
    if (target) target->budget.Charge(cpu_ns);
    counters_.cost_ns += cpu_ns;
    bool alive = target && ProcessStartTicks(window.target) == target->info.start_ticks;
    if (alive && !stopping_) ++counters_.attach_failures;
    Log("no window for pid " + std::to_string(window.target) + (alive ? ": " : " (it exited): ") + why);
    for (int client : window.clients) Reply(client, "error " + why);
    store_.RemovePartial(window.entry.file);
    for (const std::string& companion : window.entry.companions) store_.RemovePartial(companion);
  } else {
    const TraceStats& stats = trace.stats;
    WindowCost cost{stats.attach_ns, log.detach_ns,
                    stats.op_slices + stats.outside_steps + stats.allocations + stats.frees, stats.probe_ns_per_op};
    window.entry.events = trace.stats.events;
    window.entry.dropped = trace.stats.dropped_events;
    window.entry.attach_ns = trace.stats.attach_ns;
    window.entry.detach_ns = cost.detach_ns;
    window.entry.cost_ns = cost.total_ns();
    WindowDigest digest = DigestWindow(trace);
    window.entry.steps = digest.steps;
    window.entry.step_p50_ns = digest.step_p50_ns;
    window.entry.step_max_ns = digest.step_max_ns;
    if (target) {
      // The target's CPU time up to now first: charged against an older
      // reading, the cost would count against less time than it ran beside.
      if (uint64_t cpu = ProcessCpuNs(target->info.pid)) target->budget.ObserveCpu(cpu);
      target->budget.Charge(cost.total_ns());
      target->windows_written.written += 1;
      target->windows_written.last = digest;
      target->windows_written.last_cost_ns = cost.total_ns();
      if (digest.memory) target->windows_written.leaks.Observe(digest.leaks);
      window.entry.growing = target->windows_written.leaks.Growing();
    }
    counters_.cost_ns += cost.total_ns();
    recent_costs_.push_back(cost.total_ns());
    if (recent_costs_.size() > 8) recent_costs_.pop_front();
    size_t missing = 0;
    bool committed = store_.Commit(&window.entry, &error, &missing);
    if (missing)
      Log("window " + window.entry.file + ": " + Counted(missing, "file", "files") +
          " asked for (--et, --chrome) not written by its record: " + log.last_line);
    if (!committed) {
      ++counters_.windows_failed;
      Log(error);
      for (int client : window.clients) Reply(client, "error " + error);
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
      std::string text = line;
      if (window.entry.steps) {
        std::snprintf(line, sizeof line, "; %llu steps, median %.3f ms, longest %.3f ms",
                      (unsigned long long)window.entry.steps, window.entry.step_p50_ns / 1e6,
                      window.entry.step_max_ns / 1e6);
        text += line;
      }
      for (const GrowingLeak& leak : window.entry.growing) {
        std::snprintf(line, sizeof line, "; growing: %s left %.1f KiB alive in each of %llu windows",
                      leak.op.empty() ? "(outside any op)" : leak.op.c_str(),
                      leak.bytes / 1024.0 / static_cast<double>(leak.windows), (unsigned long long)leak.windows);
        text += line;
        if (!leak.line.empty()) text += " (made at " + leak.line + ")";
      }
      for (const std::string& companion : window.entry.companions) text += "; " + companion;
      Log(text);
      for (int client : window.clients) Reply(client, "ok " + store_.dir() + "/" + window.entry.file);
    }
  }
  store_.RemovePartial(window.log);
  UpdateGauges();
  Log(MetricsLogLine(counters_));
}

void Agent::Reap() {
  for (;;) {
    int status = 0;
    rusage usage = {};
    pid_t child = wait4(-1, &status, WNOHANG, &usage);
    if (child <= 0) return;
    if (keepers_.Reaped(child)) continue;
    keepers_.Adopt();  // the window's keeper, if it left one, is ours now
    if (flights_.count(child)) {
      FinishFlight(child, status);
      continue;
    }
    uint64_t cpu_ns = (static_cast<uint64_t>(usage.ru_utime.tv_sec) + static_cast<uint64_t>(usage.ru_stime.tv_sec)) *
                          1'000'000'000ull +
                      (static_cast<uint64_t>(usage.ru_utime.tv_usec) + static_cast<uint64_t>(usage.ru_stime.tv_usec)) *
                          1'000ull;
    FinishWindow(child, status, cpu_ns);
  }
}

// A record far past its window is stuck (a target's file that stalls its
// reads, a FUSE mount that stopped answering): it would hold its target's
// windows and one of --max-windows for ever. SIGTERM, then SIGKILL.
void Agent::StopOverdue() {
  uint64_t now = NowNs();
  for (auto& [child, window] : windows_) {
    if (now < window.deadline_ns) continue;
    if (!window.stopped) {
      window.stopped = true;
      ++counters_.windows_overdue;
      Log("record pid " + std::to_string(child) + " (window on pid " + std::to_string(window.target) +
          ") is far past its window: stopping it");
      kill(child, SIGTERM);
    } else {
      kill(child, SIGKILL);
    }
    window.deadline_ns = now + kKillAfterNs;
  }
}

void Agent::HandleTrigger(const Request& request) {
  TriggerRequest asked;
  std::string why;
  if (!ParseTriggerRequest(request.text, &asked, &why)) return Reply(request.client, "error " + why);
  if (stopping_) return Reply(request.client, "error the agent is stopping");
  if (trigger_.server().held() > kMaxWaitingTriggers) {
    ++counters_.clients_refused;
    return Reply(request.client, "error " + std::to_string(kMaxWaitingTriggers) + " triggers are waiting already");
  }
  auto it = targets_.find(asked.pid);
  if (asked.dump) {
    if (options_.flight.seconds <= 0)
      return Reply(request.client, "error this agent runs no flight recorder (agent --flight-recorder SECS)");
    if (it == targets_.end() || !it->second->flight)
      return Reply(request.client, "error no flight recorder runs on pid " + std::to_string(asked.pid) +
                                       (it == targets_.end() ? " (not a target)" : ""));
    kill(it->second->flight, SIGUSR2);
    it->second->dump_waiting.push_back(request.client);
    return;
  }
  if (it == targets_.end()) {
    // Not found yet (or left out by the filters or --max-targets): a trigger
    // names it, so it is taken if it maps libtorch.
    TargetFilter only;
    only.pids = {asked.pid};
    std::vector<TargetInfo> found = ScanTargets(only);
    if (found.empty())
      return Reply(request.client, "error pid " + std::to_string(asked.pid) +
                                       " is not a PyTorch process (no libtorch_cpu.so loaded)");
    AddTarget(found[0], "trigger", NextWindowAt(NowNs() + static_cast<uint64_t>(options_.every_s * 1e9)));
    it = targets_.find(asked.pid);
  }
  // Started by Schedule() as soon as the target's window (if any) is over
  // and one of --max-windows is free.
  it->second->waiting.push_back(request.client);
  it->second->waiting_s.push_back(asked.duration_s);
}

void Agent::UpdateGauges() {
  counters_.targets = targets_.size();
  counters_.files = store_.entries().size();
  counters_.bytes_on_disk = store_.bytes();
  counters_.files_removed = store_.files_removed();
  counters_.keepers = keepers_.count();
  counters_.clients_dropped = trigger_.server().dropped() + metrics_.server().dropped();
  counters_.accept_failures = trigger_.server().accept_failures() + metrics_.server().accept_failures();
  uint64_t cpu = departed_cpu_ns_;
  for (auto& [pid, target] : targets_) cpu += target->budget.cpu_ns();
  counters_.target_cpu_ns = cpu;
}

void Agent::Stop() {
  // Each running window ends now and is written (record stops on SIGTERM and
  // writes what it has); bounded, so that a stuck child cannot hold the agent.
  StopFlights();
  for (auto& [child, window] : windows_) kill(child, SIGTERM);
  uint64_t deadline = NowNs() + 30'000'000'000ull;
  while (!windows_.empty() && NowNs() < deadline) {
    Reap();
    if (!windows_.empty()) usleep(20'000);
  }
  for (auto& [child, window] : windows_) {
    kill(child, SIGKILL);
    for (int client : window.clients) Reply(client, "error the agent stopped");
  }
  for (auto& [pid, target] : targets_) {
    for (int client : target->waiting) Reply(client, "error the agent stopped");
    for (int client : target->dump_waiting) Reply(client, "error the agent stopped");
  }
  if (size_t left = keepers_.Finish(KeeperReaper::kStopWaitS))
    Log(std::to_string(left) + " keepers still removing probes after " + std::to_string(KeeperReaper::kStopWaitS) +
        " s: the agent exits without them");
  UpdateGauges();
  Log("stopped: " + MetricsLogLine(counters_));
}

void Agent::StartFlight(Target& target) {
  WindowRequest request;
  request.pid = target.info.pid;
  request.folder_fd = store_.partial_fd();
  request.output = FlightOutputName(target.info.pid);
  request.log = request.output + ".log";
  request.plan_cache = options_.plan_cache;
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(options_.mode));
  request.mode = mode;
  request.attach = options_.attach;
  request.contents = options_.contents;
  request.flight = options_.flight;
  std::string error;
  pid_t child = torchprobe::StartWindow(request, &error);
  if (child < 0) {
    target.flight_failed = true;
    Log("no flight recorder for pid " + std::to_string(target.info.pid) + ": " + error);
    return;
  }
  target.flight = child;
  flights_[child] = target.info.pid;
  char line[160];
  std::snprintf(line, sizeof line, "pid %u: flight recorder on (record pid %d, the last %.3g s, %s tier)",
                target.info.pid, child, options_.flight.seconds, options_.flight.light ? "light" : "full");
  Log(line);
}

void Agent::CollectDumps() {
  for (const FlightDump& dump : FinishedFlightDumps(store_.partial_fd(), store_.PartialPath(""))) {
    auto found = targets_.find(dump.pid);
    if (found == targets_.end()) continue;  // its target is gone: .partial is emptied at the next start
    uint32_t pid = dump.pid;
    Target* target = found->second.get();
    WindowEntry entry;
    entry.host = host_;
    entry.target = target->info;
    uint64_t kept_ns = dump.dump_ns > dump.from_ns ? dump.dump_ns - dump.from_ns : 0;
    entry.start_unix_ns = dump.dump_unix_ns > kept_ns ? dump.dump_unix_ns - kept_ns : dump.dump_unix_ns;
    entry.duration_s = kept_ns / 1e9;
    entry.triggered = dump.reason == "request";
    entry.dump = dump.reason.empty() ? "dump" : dump.reason;
    entry.events = dump.events;
    entry.file = store_.NewName(host_, target->info, entry.start_unix_ns);
    // Into the store's names (in .partial), then committed as a window is.
    std::string error;
    bool moved = true;
    std::vector<std::pair<std::string, std::string>> files = {
        {dump.base + ".pftrace", entry.file},
        {dump.base + std::string(kStallTextSuffix), CompanionName(entry.file, kStallTextSuffix)},
        {dump.base + std::string(kStallJsonSuffix), CompanionName(entry.file, kStallJsonSuffix)}};
    for (const std::string& suffix : options_.contents.CompanionSuffixes())  // --et, --chrome
      files.emplace_back(FlightDumpCompanion(dump, suffix), CompanionName(entry.file, suffix));
    for (const auto& [from, to] : files) {
      if (renameat(store_.partial_fd(), from.c_str(), store_.partial_fd(), to.c_str()) != 0) {
        moved = false;
        error = "cannot move " + from + ": " + std::strerror(errno);
      }
      if (to != entry.file) entry.companions.push_back(to);
    }
    if (moved && store_.Commit(&entry, &error)) {
      ++target->dumps;
      counters_.bytes_written += entry.bytes;
      Log("pid " + std::to_string(pid) + ": flight recorder " + entry.dump + " dump " + entry.file + " (the last " +
          std::to_string(static_cast<int>(entry.duration_s + 0.5)) + " s, " + std::to_string(entry.events) + " events)");
      for (int client : target->dump_waiting) Reply(client, "ok " + store_.dir() + "/" + entry.file);
    } else {
      Log("pid " + std::to_string(pid) + ": flight recorder dump lost: " + error);
      for (int client : target->dump_waiting) Reply(client, "error " + error);
      for (const auto& [from, to] : files) {
        store_.RemovePartial(from);
        store_.RemovePartial(to);
      }
    }
    target->dump_waiting.clear();
  }
}

void Agent::FinishFlight(pid_t child, int status) {
  uint32_t pid = flights_[child];
  flights_.erase(child);
  CollectDumps();  // what it wrote last
  std::string log = FlightOutputName(pid) + ".log";
  WindowLog summary = ReadWindowLog(store_.PartialPath(log));
  store_.RemovePartial(log);
  auto it = targets_.find(pid);
  Target* target = it == targets_.end() ? nullptr : it->second.get();
  bool alive = target && ProcessStartTicks(pid) == target->info.start_ticks;
  bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (target) {
    target->flight = 0;
    for (int client : target->dump_waiting) Reply(client, "error the flight recorder of pid " + std::to_string(pid) + " ended");
    target->dump_waiting.clear();
    // Not restarted when it failed on a live target: the same failure again.
    if (alive && !stopping_) target->flight_failed = true;
  }
  if (!stopping_)
    Log("pid " + std::to_string(pid) + ": flight recorder ended" +
        (alive ? std::string(clean ? "" : " (record failed)") + ": " + summary.last_line : " with it"));
}

void Agent::StopFlights() {
  if (flights_.empty()) return;
  uint64_t deadline = NowNs() + 15'000'000'000ull;
  if (options_.dump_at_stop) {
    std::map<uint32_t, uint64_t> before;
    for (auto& [child, pid] : flights_) {
      before[pid] = targets_.count(pid) ? targets_[pid]->dumps : 0;
      kill(child, SIGUSR2);
    }
    auto all_dumped = [&] {
      for (auto& [pid, count] : before)
        if (targets_.count(pid) && targets_[pid]->flight && targets_[pid]->dumps == count) return false;
      return true;
    };
    while (!all_dumped() && NowNs() < deadline) {
      Reap();
      CollectDumps();
      usleep(20'000);
    }
  }
  for (auto& [child, pid] : flights_) kill(child, SIGINT);
  deadline = NowNs() + 30'000'000'000ull;
  while (!flights_.empty() && NowNs() < deadline) {
    Reap();
    if (!flights_.empty()) usleep(20'000);
  }
  for (auto& [child, pid] : flights_) kill(child, SIGKILL);
}

uint64_t Agent::NextWindowAt(uint64_t not_before) const {
  if (options_.align_s <= 0) return not_before;
  // The first wall-clock multiple of --align at or after `not_before`,
  // as CLOCK_MONOTONIC (the clocks read back to back).
  uint64_t mono = NowNs(), wall = NowNs(CLOCK_REALTIME);
  uint64_t align = static_cast<uint64_t>(options_.align_s * 1e9);
  uint64_t wall_then = wall + (not_before > mono ? not_before - mono : 0);
  uint64_t boundary = (wall_then + align - 1) / align * align;
  return not_before + (boundary - wall_then);
}

int Agent::PollTimeoutMs(uint64_t next_scan) {
  uint64_t now = NowNs();
  // A flight recorder's dump is looked for every 100 ms (trigger --dump answers within a second).
  uint64_t wake = std::min<uint64_t>({next_scan, now + (rechecks_.empty() ? 100'000'000ull : 20'000'000ull),
                                      trigger_.server().NextWakeNs(), metrics_.server().NextWakeNs()});
  for (const auto& [child, window] : windows_) wake = std::min(wake, window.deadline_ns);
  for (const auto& [pid, target] : targets_) wake = std::min(wake, std::max(target->next_at_ns, now));  // on time
  return wake <= now ? 0 : static_cast<int>(std::min<uint64_t>((wake - now + 999'999) / 1'000'000, 100));
}

int Agent::Run() {
  if (!Start()) return 1;
  uint64_t next_scan = 0;
  std::vector<pollfd> fds;
  std::vector<Request> requests;
  while (!stopping_) {
    uint64_t now = NowNs();
    // A window due now starts before the scan: on a busy host reading every
    // process' /proc files can take longer than --align's precision.
    Schedule();
    if (now >= next_scan) {
      Scan();
      UpdateGauges();
      next_scan = now + static_cast<uint64_t>(options_.scan_s * 1e9);
      Schedule();  // a target the scan found
    }
    StopOverdue();
    fds.assign({{signals_, POLLIN, 0}, {events_.fd(), POLLIN, 0}});
    trigger_.server().AddPollFds(now, &fds);
    metrics_.server().AddPollFds(now, &fds);
    if (poll(fds.data(), fds.size(), PollTimeoutMs(next_scan)) < 0 && errno != EINTR) break;
    now = NowNs();
    if ((fds[1].revents & POLLIN) || !rechecks_.empty()) TakeEvents();
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(signals_, &info, sizeof info) == sizeof info)
        if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) stopping_ = true;
    }
    Reap();
    if (!flights_.empty()) CollectDumps();
    requests.clear();
    trigger_.server().Service(fds, now, &requests);
    for (const Request& request : requests) HandleTrigger(request);
    requests.clear();
    metrics_.server().Service(fds, now, &requests);
    if (!requests.empty()) UpdateGauges();
    if (!requests.empty()) {
      std::vector<TargetGauges> gauges;
      for (const auto& [pid, target] : targets_) {
        const TargetInfo& info = target->info;
        gauges.push_back({info.pid, info.rank, info.job, info.container, target->windows_written});
      }
      std::string text = MetricsText(counters_, gauges);
      for (const Request& request : requests) metrics_.Answer(request, text, now);
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
