// One uprobe as a perf event with a BPF program linked to it: the per-symbol
// route, for kernels without uprobe_multi links (before 6.6).
//
// Made with two raw calls rather than libbpf's attach helper so that one
// probe is exactly one file descriptor (the BPF link, which keeps the perf
// event alive) that torchprobe can hand to its keeper (probe_keeper.h):
// libbpf's link object holds a second, private perf fd.
#ifndef TORCHPROBE_ATTACH_PERF_UPROBE_H
#define TORCHPROBE_ATTACH_PERF_UPROBE_H

#include <cstdint>
#include <string>

namespace torchprobe {

// Puts `prog_fd` on `path` at file `offset`, the BPF program seeing `cookie`.
// pid > 0 probes only that process; pid <= 0 every process. Returns the
// link fd (close-on-exec) or -errno.
int AttachPerfUprobe(int prog_fd, const std::string& path, uint64_t offset, uint64_t cookie,
                     bool retprobe, int pid);

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_PERF_UPROBE_H
