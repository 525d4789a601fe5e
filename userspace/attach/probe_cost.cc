// Calibration of the probe cost; see the header.
#include "userspace/attach/probe_cost.h"
#include "userspace/base/clock.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "userspace/attach/bpf_programs.h"
#include "userspace/attach/probe_links.h"
#include "userspace/base/calibration_function.h"

namespace torchprobe {
namespace {

// Rounds of calls per measurement: the best round is kept, so a round that
// was preempted (a loaded machine) does not count. 5 x 100 `ret`-probed
// calls take 5-20 ms.
constexpr int kRounds = 5;
constexpr int kCallsPerRound = 100;
constexpr int kReplyTimeoutMs = 5000;

// Picoseconds per call of the best round.
uint64_t BestRoundPs() {
  uint64_t best = UINT64_MAX;
  uint64_t sink = 0;
  for (int r = 0; r < kRounds; ++r) {
    uint64_t start = NowNs();
    for (int i = 0; i < kCallsPerRound; ++i) sink += torchprobe_calibration_op(static_cast<uint64_t>(i));
    best = std::min(best, NowNs() - start);
  }
  asm volatile("" : : "r"(sink));
  return best * 1000 / kCallsPerRound;
}

// The child: one measurement unprobed, then one per byte read from `go`,
// each written to `out`. Only async-signal-safe calls: the parent may have
// threads. It holds none of torchprobe's descriptors (links, the keeper's),
// so nothing of torchprobe outlives torchprobe through it.
[[noreturn]] void RunChild(int go, int out) {
  int low = std::min(go, out), high = std::max(go, out);
  if (low > 3) close_range(3, low - 1, 0);
  if (high > low + 1) close_range(low + 1, high - 1, 0);
  close_range(high + 1, ~0u, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  prctl(PR_SET_NAME, "torchprobe-cal");
  char command;
  uint64_t ps = BestRoundPs();
  if (write(out, &ps, sizeof(ps)) != sizeof(ps)) _exit(1);
  while (read(go, &command, 1) == 1) {
    ps = BestRoundPs();
    if (write(out, &ps, sizeof(ps)) != sizeof(ps)) _exit(1);
  }
  _exit(0);
}

class Child {
 public:
  ~Child() {
    if (go_ >= 0) close(go_);  // the child exits when it reads EOF
    if (out_ >= 0) close(out_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);  // already gone, or stuck: never left behind
      while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  Status Start() {
    int go[2], out[2];
    if (pipe2(go, O_CLOEXEC) != 0) return Status::Error(std::string("calibration pipe: ") + strerror(errno));
    if (pipe2(out, O_CLOEXEC) != 0) {
      close(go[0]);
      close(go[1]);
      return Status::Error(std::string("calibration pipe: ") + strerror(errno));
    }
    pid_ = fork();
    if (pid_ == 0) RunChild(go[0], out[1]);
    close(go[0]);
    close(out[1]);
    go_ = go[1];
    out_ = out[0];
    if (pid_ < 0) return Status::Error(std::string("cannot fork the calibration child: ") + strerror(errno));
    return Status::Ok();
  }
  pid_t pid() const { return pid_; }
  // Asks for one more measurement (none for the first: it starts unprobed).
  StatusOr<uint64_t> Measure(bool ask) {
    if (ask && write(go_, "m", 1) != 1) return Status::Error("the calibration child is gone");
    pollfd p = {out_, POLLIN, 0};
    uint64_t ps = 0;
    if (poll(&p, 1, kReplyTimeoutMs) != 1 || read(out_, &ps, sizeof(ps)) != sizeof(ps))
      return Status::Error("the calibration child did not answer");
    return ps;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  int out_ = -1;
};

}  // namespace

StatusOr<ProbeCost> MeasureProbeCost(const ProbeCostRoutes& routes) {
  uint64_t start = NowNs();
  if (routes.entry_offset == 0 || routes.return_offsets.empty())
    return Status::Error("the calibration function's probe places were not given");
  BpfConfig config;
  config.use_uprobe_multi = routes.use_uprobe_multi;
  config.uretprobe_returns = routes.uretprobe;
  config.ring_bytes = 1u << 20;  // room for every event of the calibration: no drop path
  StatusOr<std::unique_ptr<BpfPrograms>> bpf = BpfPrograms::Load(config);
  if (!bpf.ok()) return bpf.status();
  if (routes.uretprobe && !(*bpf)->Program("op_uret"))
    return Status::Error("uretprobe returns are not loaded (no uprobe_multi)");

  // One child per route, each probed for its whole life: removing a probe
  // waits for the kernel's grace periods (~50 ms), so nothing is removed
  // until every route is measured.
  struct Route {
    Route(bool uretprobe, uint64_t* ns) : uretprobe(uretprobe), ns(ns) {}
    bool uretprobe;
    uint64_t* ns;
    Child child;
    uint64_t unprobed_ps = 0;
    ProbeLinks links;
  };
  ProbeCost cost;
  std::vector<std::unique_ptr<Route>> measured;
  if (routes.uretprobe) measured.push_back(std::make_unique<Route>(true, &cost.uretprobe_ns));
  if (routes.ret) measured.push_back(std::make_unique<Route>(false, &cost.ret_ns));
  for (auto& route : measured) {
    Status status = route->child.Start();
    if (!status.ok()) return status;
  }
  for (auto& route : measured) {
    StatusOr<uint64_t> unprobed = route->child.Measure(false);
    if (!unprobed.ok()) return unprobed.status();
    route->unprobed_ps = *unprobed;
    // The links as AttachOps makes them for an op of one process.
    ProbeTarget entries, returns;
    entries.path = returns.path = "/proc/self/exe";
    entries.pid = returns.pid = route->child.pid();
    entries.offsets = {routes.entry_offset};
    entries.cookies = {0};
    returns.retprobe = route->uretprobe;
    returns.offsets = route->uretprobe ? entries.offsets : routes.return_offsets;
    returns.cookies.assign(returns.offsets.size(), 0);
    bpf_program* on_return = route->uretprobe ? (*bpf)->Program("op_uret") : (*bpf)->Program("op_return");
    StatusOr<ProbeLinks> links = ProbeLinks::Attach((*bpf)->Program("op_enter"), entries, on_return, &returns,
                                                    routes.use_uprobe_multi, nullptr);
    if (!links.ok()) return links.status();
    route->links = std::move(*links);
  }
  for (auto& route : measured) {  // one at a time: they would compete for the CPUs
    StatusOr<uint64_t> probed = route->child.Measure(true);
    if (!probed.ok()) return probed.status();
    // Rounding can make a cost too small to see come out at 0 or below:
    // report at least 1 ns, the probes did run.
    uint64_t ps = *probed > route->unprobed_ps ? *probed - route->unprobed_ps : 0;
    *route->ns = std::max<uint64_t>(ps / 1000, 1);
  }
  cost.took_ns = NowNs() - start;  // the probes come off after, as `measured` goes
  return cost;
}

void PutProbeCost(const ProbeCost& cost, TraceStats* stats) {
  stats->probe_ns_uretprobe = cost.uretprobe_ns;
  stats->probe_ns_ret = cost.ret_ns;
  stats->probe_ns_calibration = cost.took_ns;
  // Weighted by processes when their routes differ.
  uint64_t uret = cost.uretprobe_ns ? stats->uretprobe_processes : 0;
  uint64_t ret = uret ? stats->ret_fallbacks : 1;
  stats->probe_ns_per_op = (uret * cost.uretprobe_ns + ret * cost.ret_ns) / (uret + ret);
}

std::string ProbeCostSummary(const TraceStats& stats) {
  if (stats.probe_ns_per_op == 0) return "";
  char buf[128];
  std::snprintf(buf, sizeof(buf), "; probe cost %.1f us per op", stats.probe_ns_per_op / 1e3);
  std::string text = buf;
  if (stats.op_time_ns) {
    uint64_t unseen = stats.unwound + stats.end_repaired;
    uint64_t returned = stats.op_slices > unseen ? stats.op_slices - unseen : 0;
    std::snprintf(buf, sizeof(buf), ", %.1f%% of the time inside ops",
                  100.0 * static_cast<double>(returned * stats.probe_ns_per_op) /
                      static_cast<double>(stats.op_time_ns));
    text += buf;
  }
  return text;
}

}  // namespace torchprobe
