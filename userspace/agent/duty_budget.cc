#include "userspace/agent/duty_budget.h"

namespace torchprobe {

void DutyBudget::ObserveCpu(uint64_t cpu_ns) {
  if (!based_) {
    based_ = true;
    base_cpu_ns_ = cpu_ns;
  }
  if (cpu_ns > cpu_ns_) cpu_ns_ = cpu_ns;
}

bool DutyBudget::Allows(uint64_t prior_ns) const {
  if (budget_ <= 0) return true;  // --budget none
  uint64_t expected = last_cost_ns_ > prior_ns ? last_cost_ns_ : prior_ns;
  return static_cast<double>(cost_ns_) + kHeadroom * static_cast<double>(expected) <=
         budget_ * static_cast<double>(cpu_ns());
}

void DutyBudget::Charge(uint64_t cost_ns) {
  cost_ns_ += cost_ns;
  last_cost_ns_ = cost_ns;
}

}  // namespace torchprobe
