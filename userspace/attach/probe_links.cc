// uprobe_multi or per-symbol attachment of a probe target; see the header.
#include "userspace/attach/probe_links.h"

#include <bpf/libbpf.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "userspace/attach/uprobe_multi.h"

namespace torchprobe {
namespace {

Status AttachGroup(bpf_program* prog, const char* what, const ProbeTarget& target,
                   bool use_uprobe_multi, std::vector<int>* link_fds,
                   std::vector<bpf_link*>* links) {
  if (target.offsets.empty()) return Status::Ok();
  if (use_uprobe_multi) {
    int fd = CreateUprobeMultiLink(bpf_program__fd(prog), target.path, target.offsets,
                                   target.cookies, target.retprobe, target.pid);
    if (fd < 0)
      return Status::Error(std::string("cannot attach ") + what + " probes to " + target.path +
                           " (uprobe_multi, " + std::to_string(target.offsets.size()) +
                           " functions): " + std::strerror(-fd));
    link_fds->push_back(fd);
    return Status::Ok();
  }
  links->reserve(target.offsets.size());
  for (size_t i = 0; i < target.offsets.size(); ++i) {
    LIBBPF_OPTS(bpf_uprobe_opts, opts);
    opts.bpf_cookie = target.cookies[i];
    opts.retprobe = target.retprobe;
    bpf_link* link = bpf_program__attach_uprobe_opts(prog, target.pid, target.path.c_str(),
                                                     target.offsets[i], &opts);
    if (!link)
      return Status::Error(std::string("cannot attach ") + what + " uprobe to " + target.path +
                           " at offset " + std::to_string(target.offsets[i]) + ": " +
                           std::strerror(errno));
    links->push_back(link);
  }
  return Status::Ok();
}

}  // namespace

void ProbeLinks::Group::Close() {
  for (int fd : link_fds) close(fd);
  link_fds.clear();
  for (bpf_link* link : links) bpf_link__destroy(link);
  links.clear();
}

ProbeLinks::ProbeLinks(ProbeLinks&& other) noexcept { *this = std::move(other); }

ProbeLinks& ProbeLinks::operator=(ProbeLinks&& other) noexcept {
  if (this != &other) {
    DetachAll();
    entries_ = std::move(other.entries_);
    returns_ = std::move(other.returns_);
    probe_count_ = other.probe_count_;
    other.entries_ = {};
    other.returns_ = {};
    other.probe_count_ = 0;
  }
  return *this;
}

StatusOr<ProbeLinks> ProbeLinks::Attach(bpf_program* on_entry, const ProbeTarget& entries,
                                        bpf_program* on_return, const ProbeTarget* returns,
                                        bool use_uprobe_multi) {
  ProbeLinks result;
  if (on_return && returns) {
    Status status = AttachGroup(on_return, "return", *returns, use_uprobe_multi,
                                &result.returns_.link_fds, &result.returns_.links);
    if (!status.ok()) return status;
  }
  Status status = AttachGroup(on_entry, "entry", entries, use_uprobe_multi,
                              &result.entries_.link_fds, &result.entries_.links);
  if (!status.ok()) return status;
  result.probe_count_ = entries.offsets.size();
  return result;
}

void ProbeLinks::DetachEntries() { entries_.Close(); }

void ProbeLinks::DetachAll() {
  entries_.Close();
  returns_.Close();
}

}  // namespace torchprobe
