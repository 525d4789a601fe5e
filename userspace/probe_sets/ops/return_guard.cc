#include "userspace/probe_sets/ops/return_guard.h"

#include <bpf/libbpf.h>

#include <cstdio>
#include <optional>

#include "userspace/discover/unwinder_probes.h"

namespace torchprobe {

void ReturnGuard::SetContext(const ProbeSetContext& context) {
  context_ = context;
  if (context_.bpf->Program("op_uret"))
    context_.keeper->SetReturnFixing(context_.bpf->MapFd("fixes"),
                                     bpf_program__fd(context_.bpf->Program("list_returns")));
}

StatusOr<bool> ReturnGuard::Guard(uint32_t pid, OpStackModel& model) {
  const bool want_uretprobes = returns_ != "ret";
  if (guarded(pid)) return want_uretprobes;
  if (!IsProcessAlive(pid)) return false;  // gone: its links will fail and say so
  std::string why = unavailable_;
  if (why.empty() && !context_.bpf->Program("op_uret")) why = "its BPF programs are not loaded";
  std::optional<UnwinderProbes> unwinder;
  if (why.empty()) {
    StatusOr<UnwinderProbes> found = FindUnwinderProbes(pid);
    if (found.ok()) unwinder = std::move(*found);
    else why = found.status().message();
  }
  // The tracer first, then the unwinder probe: no throw may find a
  // trampoline that no one will take off.
  bpf_program* on_throw = context_.bpf->Program("on_throw");
  if (why.empty()) {
    context_.keeper->SetGuardProbe(unwinder->host_path, unwinder->offsets, bpf_program__fd(on_throw));
    why = context_.keeper->GuardReturns(static_cast<pid_t>(pid));
  }
  if (!why.empty() && !IsProcessAlive(pid)) return false;
  if (why.empty()) {
    ProbeTarget target;
    target.path = unwinder->host_path;
    target.offsets = unwinder->offsets;
    target.cookies.assign(target.offsets.size(), 0);
    target.pid = static_cast<int>(pid);
    target.op_cookies = false;
    target.guards_returns = true;
    StatusOr<ProbeLinks> links =
        ProbeLinks::Attach(on_throw, target, nullptr, nullptr, context_.use_uprobe_multi, context_.keeper);
    if (links.ok()) {
      guards_[pid] = std::move(*links);
      if (!want_uretprobes) {
        model.ReturnsThroughRet(pid);
        return false;
      }
      ++model.stats().uretprobe_processes;
      return true;
    }
    context_.keeper->ReleaseReturns(static_cast<pid_t>(pid));
    why = links.status().message();
  }
  if (returns_ == "uretprobe")
    return Status::Error("--returns uretprobe: process " + std::to_string(pid) + ": " + why);
  if (!want_uretprobes) return false;  // asked for: not a fallback; unguarded where it cannot be
  ++model.stats().ret_fallbacks;
  if (!quiet_)
    std::fprintf(stderr, "torchprobe: process %u: op returns through `ret` probes (about 10x the cost): %s\n", pid,
                 why.c_str());
  return false;
}

void ReturnGuard::Release(uint32_t pid) {
  auto it = guards_.find(pid);
  if (it == guards_.end()) return;
  context_.keeper->ReleaseReturns(static_cast<pid_t>(pid));
  guards_.erase(it);  // its unwinder probe goes with it
}

void ReturnGuard::ReleaseAll() {
  for (const auto& [pid, links] : guards_) context_.keeper->ReleaseReturns(static_cast<pid_t>(pid));
}

}  // namespace torchprobe
