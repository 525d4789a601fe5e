// uprobe_multi or per-symbol attachment of a probe target; see the header.
#include "userspace/attach/probe_links.h"

#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "bpf/events.h"
#include "userspace/attach/perf_uprobe.h"
#include "userspace/attach/probe_keeper.h"
#include "userspace/attach/uprobe_multi.h"
#include "userspace/base/proc_maps.h"

namespace torchprobe {

ProbeLinks::ProbeLinks(ProbeLinks&& other) noexcept { *this = std::move(other); }

ProbeLinks& ProbeLinks::operator=(ProbeLinks&& other) noexcept {
  if (this != &other) {
    Detach();
    keeper_ = other.keeper_;
    group_ = other.group_;
    fds_ = std::move(other.fds_);
    probe_count_ = other.probe_count_;
    link_count_ = other.link_count_;
    other.group_ = 0;
    other.fds_.clear();
    other.probe_count_ = other.link_count_ = 0;
  }
  return *this;
}

void ProbeLinks::Own(int fd, uint32_t op_id, int pid, uint64_t witness) {
  ++link_count_;
  if (keeper_) {
    keeper_->Adopt(fd, group_, op_id, pid, witness);
  } else {
    fds_.push_back(fd);
  }
}

Status ProbeLinks::AttachGroup(bpf_program* prog, const char* what, const ProbeTarget& target,
                               bool use_uprobe_multi) {
  if (target.offsets.empty()) return Status::Ok();
  int prog_fd = bpf_program__fd(prog);
  // Where each link's breakpoints land in its process, for the keeper to
  // tell when a removal has taken them out of the code (HotInCode): read
  // from the process' maps once for the group; none for a link on every
  // process (launch mode).
  std::vector<uint64_t> witnesses;
  if (keeper_ && target.pid > 0)
    witnesses = MappedCodeAddresses(static_cast<uint32_t>(target.pid), target.path,
                                    use_uprobe_multi ? std::vector<uint64_t>{target.offsets[0]} : target.offsets);
  auto witness = [&](size_t i) { return i < witnesses.size() ? witnesses[i] : 0; };
  if (use_uprobe_multi) {
    int fd = CreateUprobeMultiLink(prog_fd, target.path, target.offsets, target.cookies,
                                   target.retprobe, target.pid);
    if (fd < 0)
      return Status::Error(std::string("cannot attach ") + what + " probes to " + target.path +
                           " (uprobe_multi, " + std::to_string(target.offsets.size()) +
                           " functions): " + std::strerror(-fd));
    // One fd for every op: no order to choose.
    Own(fd, target.guards_returns ? ProbeKeeper::kReturnGuard : ProbeKeeper::kAlwaysHot,
        target.pid, witness(0));
    return Status::Ok();
  }
  for (size_t i = 0; i < target.offsets.size(); ++i) {
    int fd = AttachPerfUprobe(prog_fd, target.path, target.offsets[i], target.cookies[i],
                              target.retprobe, target.pid);
    if (fd < 0) {
      std::string why = std::strerror(-fd);
      if (fd == -EMFILE)
        why += " (per-symbol uprobes take one file descriptor each: raise `ulimit -n`)";
      return Status::Error(std::string("cannot attach ") + what + " uprobe to " + target.path +
                           " at offset " + std::to_string(target.offsets[i]) + ": " + why);
    }
    uint32_t op_id = target.guards_returns ? ProbeKeeper::kReturnGuard
                     : target.op_cookies
                         ? static_cast<uint32_t>(target.cookies[i]) & ~TP_COOKIE_SHARED_RET
                         : ProbeKeeper::kAlwaysHot;
    Own(fd, op_id, target.pid, witness(i));
  }
  return Status::Ok();
}

StatusOr<ProbeLinks> ProbeLinks::Attach(bpf_program* on_entry, const ProbeTarget& entries,
                                        bpf_program* on_return, const ProbeTarget* returns,
                                        bool use_uprobe_multi, ProbeKeeper* keeper) {
  ProbeLinks result;
  result.keeper_ = keeper;
  if (keeper) result.group_ = keeper->NewGroup();
  if (on_return && returns) {
    Status status = result.AttachGroup(on_return, "return", *returns, use_uprobe_multi);
    if (!status.ok()) return status;  // result's destructor detaches
  }
  Status status = result.AttachGroup(on_entry, "entry", entries, use_uprobe_multi);
  if (!status.ok()) return status;
  result.probe_count_ = entries.offsets.size();
  return result;
}

Status ProbeLinks::AddEntries(bpf_program* on_entry, const ProbeTarget& entries,
                              bool use_uprobe_multi) {
  Status status = AttachGroup(on_entry, "entry", entries, use_uprobe_multi);
  if (status.ok()) probe_count_ += entries.offsets.size();
  return status;
}

void ProbeLinks::Detach() {
  if (keeper_ && group_) keeper_->Release(group_);
  group_ = 0;
  for (int fd : fds_) close(fd);
  fds_.clear();
}

StatusOr<ProbeLinks> AttachFunction(const FunctionPlace& where, bpf_program* on_entry, uint64_t offset,
                                    bpf_program* on_return, const std::vector<uint64_t>& returns) {
  ProbeTarget at, rets;
  at.path = rets.path = where.path;
  at.pid = rets.pid = where.pid;
  at.op_cookies = rets.op_cookies = false;
  at.offsets = {offset};
  at.cookies = {0};
  rets.offsets = returns;
  rets.cookies.assign(returns.size(), 0);
  return ProbeLinks::Attach(on_entry, at, on_return, on_return ? &rets : nullptr, where.use_uprobe_multi,
                            where.keeper);
}

}  // namespace torchprobe
