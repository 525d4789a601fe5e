// Links for the memory probe set; see the header.
#include "userspace/probe_sets/memory/memory_links.h"

#include <utility>

namespace torchprobe {
namespace {

// One function: `entry` at `offset` and, when `on_return` is given, it at
// each of `returns`; appended to `links`.
Status AttachFunction(bpf_program* entry, uint64_t offset, bpf_program* on_return,
                      const std::vector<uint64_t>& returns, const MemoryLinkTarget& where,
                      std::vector<ProbeLinks>* links) {
  ProbeTarget at, rets;
  at.path = rets.path = where.path;
  at.pid = rets.pid = where.pid;
  at.op_cookies = rets.op_cookies = false;  // one probe each, hit often: removed first
  at.offsets = {offset};
  at.cookies = {0};
  rets.offsets = returns;
  rets.cookies.assign(returns.size(), 0);
  StatusOr<ProbeLinks> attached = ProbeLinks::Attach(entry, at, on_return, on_return ? &rets : nullptr,
                                                     where.use_uprobe_multi, where.keeper);
  if (!attached.ok()) return attached.status();
  links->push_back(std::move(*attached));
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<ProbeLinks>> AttachAllocatorLinks(const BpfPrograms& bpf, const AllocatorProbes& probes,
                                                       const MemoryLinkTarget& where) {
  std::vector<ProbeLinks> links;
  Status status = AttachFunction(bpf.Program("alloc_enter"), probes.alloc_offset, bpf.Program("alloc_return"),
                                 probes.alloc_returns, where, &links);
  if (status.ok()) status = AttachFunction(bpf.Program("free_enter"), probes.free_offset, nullptr, {}, where, &links);
  if (status.ok() && probes.device_report_offset)
    status = AttachFunction(bpf.Program("device_report"), probes.device_report_offset, nullptr, {}, where, &links);
  if (!status.ok()) return status;
  return links;
}

StatusOr<std::vector<ProbeLinks>> AttachSegmentLinks(const BpfPrograms& bpf, const SegmentProbes& probes,
                                                     const MemoryLinkTarget& where) {
  std::vector<ProbeLinks> links;
  Status status = AttachFunction(bpf.Program("segment_enter"), probes.malloc_offset, bpf.Program("segment_return"),
                                 probes.malloc_returns, where, &links);
  if (status.ok()) status = AttachFunction(bpf.Program("segment_free"), probes.free_offset, nullptr, {}, where, &links);
  if (!status.ok()) return status;
  return links;
}

}  // namespace torchprobe
