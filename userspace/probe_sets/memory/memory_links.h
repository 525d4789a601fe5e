// The links of the --memory probe set on one process: libc10's CPU
// allocator (alloc_cpu's entry and `ret`s, free_cpu, and the device report
// where libc10 has it) and the CUDA runtime's cudaMalloc/cudaFree. Kept out
// of the record session, which only decides when a process gets them.
#ifndef TORCHPROBE_PROBE_SETS_MEMORY_LINKS_H
#define TORCHPROBE_PROBE_SETS_MEMORY_LINKS_H

#include <string>
#include <vector>

#include "userspace/attach/bpf_programs.h"
#include "userspace/attach/probe_links.h"
#include "userspace/base/status.h"
#include "userspace/discover/allocator_probes.h"

namespace torchprobe {

StatusOr<std::vector<ProbeLinks>> AttachAllocatorLinks(const BpfPrograms& bpf, const AllocatorProbes& probes,
                                                       const FunctionPlace& where);
StatusOr<std::vector<ProbeLinks>> AttachSegmentLinks(const BpfPrograms& bpf, const SegmentProbes& probes,
                                                     const FunctionPlace& where);

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_MEMORY_LINKS_H
