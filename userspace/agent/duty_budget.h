// The duty-cycle budget (--budget PCT): what windows cost the targets,
// against the CPU time the targets used, measured as the agent runs.
//
// A window's cost to its target is what the target itself pays:
//   attach + detach time (record's attach_ns/detach_ns: the target runs on,
//   but each probe installed or removed goes through the kernel's uprobe
//   lock and its breakpoints' first hits), plus
//   probe hits x the per-op probe cost record calibrated (probe_ns_per_op):
//   the op slices written, those a steps window ran through outside its
//   steps, and with --memory every allocation and free (an entry and a
//   return probe each, as an op; a free has no return probe: an upper bound).
//   --shapes' argument reads are not in the calibration: a lower bound there.
// The CPU record itself burns (discovery, BPF loading, writing) is on
// another core and not charged to the target. The duty cycle is the sum of
// costs over the targets' CPU time since the agent found them.
//
// A scheduled window is taken only when, with kHeadroom times its expected
// cost, the duty cycle stays within the budget; otherwise it is skipped, and
// counted. The expected cost is the larger of the target's last window's and
// `prior`: the most the agent's recent windows cost (on any target), and
// before any, kFirstWindowPriorNs. The headroom is for a window that costs
// more than any before it (measured here: one window 70 ms, the next 350). So a target's first window, too, waits until the
// target has run long enough to afford it (at 1%, ~20 s of its CPU time):
// never inside its `import torch`, and never a first window that alone
// breaks the budget. A triggered window is always taken, and charged.
//
// A window that writes nothing (record failed: the target exited, or is no
// real PyTorch process) has no measured cost; it is charged the CPU time its
// record used, so that it is not free to repeat: any process can make
// itself a target, and one whose windows always fail would otherwise cost a
// root `record` every --every seconds for ever.
#ifndef TORCHPROBE_AGENT_DUTY_BUDGET_H
#define TORCHPROBE_AGENT_DUTY_BUDGET_H

#include <cstdint>

namespace torchprobe {

struct WindowCost {
  uint64_t attach_ns = 0;
  uint64_t detach_ns = 0;
  uint64_t probe_hits = 0;  // ops and allocations probed while attached
  uint64_t probe_ns_per_op = 0;
  uint64_t total_ns() const { return attach_ns + detach_ns + probe_hits * probe_ns_per_op; }
};

// What a window is expected to cost before the agent has measured one:
// above what windows of a training loop cost here (attach ~40 ms, detach
// ~100 ms, probe hits ~100 ms; up to ~350 ms in all on a loaded 2-core VM).
inline constexpr uint64_t kFirstWindowPriorNs = 300'000'000;
// A window is taken when this many times its expected cost fits the budget.
inline constexpr double kHeadroom = 1.5;

// Per target.
class DutyBudget {
 public:
  explicit DutyBudget(double budget_fraction) : budget_(budget_fraction) {}
  // The target's CPU time now (ProcessCpuNs); the first call sets the base.
  void ObserveCpu(uint64_t cpu_ns);
  // Would one more window, of the larger of the last one's cost and
  // `prior_ns`, keep the duty cycle within budget?
  bool Allows(uint64_t prior_ns = kFirstWindowPriorNs) const;
  // A window's cost: WindowCost::total_ns() for a window written, its
  // record's CPU time for one that failed.
  void Charge(uint64_t cost_ns);

  uint64_t cost_ns() const { return cost_ns_; }
  uint64_t cpu_ns() const { return cpu_ns_ > base_cpu_ns_ ? cpu_ns_ - base_cpu_ns_ : 0; }

 private:
  double budget_;
  bool based_ = false;
  uint64_t base_cpu_ns_ = 0;
  uint64_t cpu_ns_ = 0;
  uint64_t cost_ns_ = 0;
  uint64_t last_cost_ns_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_DUTY_BUDGET_H
