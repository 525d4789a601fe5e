// Which route a process' op returns take: uretprobes, where the keeper can
// guard the process' C++ exceptions (attach/return_fixer.h), else a uprobe on
// every `ret` (--returns). The guard goes on every process that can have it,
// whatever its own route: the kernel keeps one uprobe per function for all
// its users and, on each hit, prepares the return for every user that has a
// return handler, whichever process its filter names. So another run's
// uretprobes on the same libtorch (another torchprobe's, on another
// process) put trampolines on a `ret`-route process' stack too, and its first
// C++ exception through one would end it in std::terminate. The guard takes
// them off like ours.
#ifndef TORCHPROBE_PROBE_SETS_OPS_RETURN_GUARD_H
#define TORCHPROBE_PROBE_SETS_OPS_RETURN_GUARD_H

#include <cstdint>
#include <map>
#include <string>

#include "userspace/probe_sets/probe_set.h"

namespace torchprobe {

class ReturnGuard {
 public:
  // `returns`: --returns (auto|uretprobe|ret).
  ReturnGuard(std::string returns, bool quiet) : returns_(std::move(returns)), quiet_(quiet) {}

  // The keeper learns where it gives return addresses back.
  void SetContext(const ProbeSetContext& context);
  // No process can have uretprobe returns, and why (said once per process).
  void SetUnavailable(std::string why) { unavailable_ = std::move(why); }
  // Guards `pid` (once) and says whether its op returns go through
  // uretprobes (true) or `ret` probes (false: said and counted in `model`'s
  // stats when it is a fallback). An error only under --returns uretprobe.
  StatusOr<bool> Guard(uint32_t pid, OpStackModel& model);
  bool guarded(uint32_t pid) const { return guards_.count(pid) != 0; }
  // `pid`'s program is gone: its returns given back (after its return probes).
  void Release(uint32_t pid);
  // After the keeper removed every probe: every guarded process' returns.
  void ReleaseAll();

 private:
  std::string returns_;
  bool quiet_ = false;
  std::string unavailable_;
  ProbeSetContext context_;
  std::map<uint32_t, ProbeLinks> guards_;  // the unwinder probe of each guarded process
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_OPS_RETURN_GUARD_H
