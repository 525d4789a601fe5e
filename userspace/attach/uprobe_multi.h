// uprobe_multi links through the raw bpf(BPF_LINK_CREATE) call.
//
// Why raw: Debian bookworm's libbpf 1.1 predates the uprobe_multi helper,
// while the kernels we run on (6.6+) have the link type. The kernel UAPI is
// stable, so ~one struct and one syscall keep us on Debian's own libbpf
// instead of adding a backports apt source to every machine that builds us.
#ifndef TORCHPROBE_ATTACH_UPROBE_MULTI_H
#define TORCHPROBE_ATTACH_UPROBE_MULTI_H

#include <cstdint>
#include <string>
#include <vector>

namespace torchprobe {

// enum bpf_attach_type value of BPF_TRACE_UPROBE_MULTI (kernel 6.6+).
inline constexpr uint32_t kBpfTraceUprobeMulti = 48;

// True when the running kernel can create uprobe_multi links. Probed once
// (a throwaway program and a link on "/" that must fail with EBADF).
bool HaveUprobeMulti();

// One link that attaches `prog_fd` at every offset of `path`, each with its
// cookie. pid > 0 restricts the probes to that process (the kernel filters
// and does not even install breakpoints elsewhere). Returns the link fd or
// -errno.
int CreateUprobeMultiLink(int prog_fd, const std::string& path,
                          const std::vector<uint64_t>& offsets,
                          const std::vector<uint64_t>& cookies, bool retprobe,
                          int pid);

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_UPROBE_MULTI_H
