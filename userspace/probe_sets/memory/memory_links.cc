// Links for the memory probe set; see the header.
#include "userspace/probe_sets/memory/memory_links.h"

#include <utility>

namespace torchprobe {
namespace {

// One function (`entry` at `offset`, `on_return` at each of `returns`),
// appended to `links`.
Status AppendFunction(bpf_program* entry, uint64_t offset, bpf_program* on_return,
                      const std::vector<uint64_t>& returns, const FunctionPlace& where,
                      std::vector<ProbeLinks>* links) {
  StatusOr<ProbeLinks> attached = AttachFunction(where, entry, offset, on_return, returns);
  if (!attached.ok()) return attached.status();
  links->push_back(std::move(*attached));
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<ProbeLinks>> AttachAllocatorLinks(const BpfPrograms& bpf, const AllocatorProbes& probes,
                                                       const FunctionPlace& where) {
  std::vector<ProbeLinks> links;
  Status status = AppendFunction(bpf.Program("alloc_enter"), probes.alloc_offset, bpf.Program("alloc_return"),
                                 probes.alloc_returns, where, &links);
  if (status.ok()) status = AppendFunction(bpf.Program("free_enter"), probes.free_offset, nullptr, {}, where, &links);
  if (status.ok() && probes.device_report_offset)
    status = AppendFunction(bpf.Program("device_report"), probes.device_report_offset, nullptr, {}, where, &links);
  if (!status.ok()) return status;
  return links;
}

StatusOr<std::vector<ProbeLinks>> AttachSegmentLinks(const BpfPrograms& bpf, const SegmentProbes& probes,
                                                     const FunctionPlace& where) {
  std::vector<ProbeLinks> links;
  Status status = AppendFunction(bpf.Program("segment_enter"), probes.malloc_offset, bpf.Program("segment_return"),
                                 probes.malloc_returns, where, &links);
  if (status.ok()) status = AppendFunction(bpf.Program("segment_free"), probes.free_offset, nullptr, {}, where, &links);
  if (!status.ok()) return status;
  return links;
}

}  // namespace torchprobe
