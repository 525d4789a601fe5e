#include "userspace/agent/duty_budget.h"

namespace torchprobe {

void DutyBudget::ObserveCpu(uint64_t cpu_ns) {
  if (!based_) {
    based_ = true;
    base_cpu_ns_ = cpu_ns;
  }
  if (cpu_ns > cpu_ns_) cpu_ns_ = cpu_ns;
}

bool DutyBudget::Allows() const {
  if (budget_ <= 0) return true;         // --budget none
  if (last_cost_ns_ == 0) return true;  // nothing measured yet: the first window measures
  return static_cast<double>(cost_ns_ + last_cost_ns_) <= budget_ * static_cast<double>(cpu_ns());
}

void DutyBudget::Charge(uint64_t cost_ns) {
  cost_ns_ += cost_ns;
  last_cost_ns_ = cost_ns;
}

}  // namespace torchprobe
