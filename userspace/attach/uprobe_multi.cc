// Raw BPF_LINK_CREATE for uprobe_multi; see the header for why.
#include "userspace/attach/uprobe_multi.h"

#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace torchprobe {
namespace {

constexpr uint32_t kUprobeMultiReturn = 1;  // BPF_F_UPROBE_MULTI_RETURN

// The BPF_LINK_CREATE member of union bpf_attr, with the uprobe_multi arm
// that bookworm's <linux/bpf.h> does not have yet. Offsets are the UAPI's.
struct LinkCreateUprobeMulti {
  uint32_t prog_fd;
  uint32_t target_fd;
  uint32_t attach_type;
  uint32_t flags;
  uint64_t path;
  uint64_t offsets;
  uint64_t ref_ctr_offsets;
  uint64_t cookies;
  uint32_t cnt;
  uint32_t uprobe_flags;
  uint32_t pid;
  uint32_t pad;
};
static_assert(sizeof(LinkCreateUprobeMulti) == 64, "bpf_attr.link_create ABI");

int LinkCreate(const LinkCreateUprobeMulti& request) {
  union bpf_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  static_assert(sizeof(attr) >= sizeof(request));
  std::memcpy(&attr, &request, sizeof(request));
  long fd = syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr));
  return fd < 0 ? -errno : static_cast<int>(fd);
}

bool ProbeUprobeMulti() {
  // "r0 = 0; exit" as a kprobe-type program expecting uprobe_multi links.
  const struct bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts);
  opts.expected_attach_type = static_cast<enum bpf_attach_type>(kBpfTraceUprobeMulti);
  int prog_fd = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "tp_probe_um", "GPL", insns, 2, &opts);
  if (prog_fd < 0) return false;
  // A link on "/" (not a regular file) must fail with EBADF on kernels that
  // know the link type, and with EINVAL on those that do not.
  uint64_t offset = 0;
  LinkCreateUprobeMulti request = {};
  request.prog_fd = prog_fd;
  request.attach_type = kBpfTraceUprobeMulti;
  request.path = reinterpret_cast<uint64_t>("/");
  request.offsets = reinterpret_cast<uint64_t>(&offset);
  request.cnt = 1;
  int fd = LinkCreate(request);
  close(prog_fd);
  if (fd >= 0) {
    close(fd);
    return true;
  }
  return fd == -EBADF;
}

}  // namespace

bool HaveUprobeMulti() {
  static const bool have = ProbeUprobeMulti();
  return have;
}

int CreateUprobeMultiLink(int prog_fd, const std::string& path,
                          const std::vector<uint64_t>& offsets,
                          const std::vector<uint64_t>& cookies, bool retprobe,
                          int pid) {
  if (offsets.empty() || cookies.size() != offsets.size()) return -EINVAL;
  LinkCreateUprobeMulti request = {};
  request.prog_fd = static_cast<uint32_t>(prog_fd);
  request.attach_type = kBpfTraceUprobeMulti;
  request.path = reinterpret_cast<uint64_t>(path.c_str());
  request.offsets = reinterpret_cast<uint64_t>(offsets.data());
  request.cookies = reinterpret_cast<uint64_t>(cookies.data());
  request.cnt = static_cast<uint32_t>(offsets.size());
  request.uprobe_flags = retprobe ? kUprobeMultiReturn : 0;
  request.pid = pid > 0 ? static_cast<uint32_t>(pid) : 0;
  return LinkCreate(request);
}

}  // namespace torchprobe
