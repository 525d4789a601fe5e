// perf_event_open(uprobe PMU) + BPF_LINK_CREATE(BPF_PERF_EVENT); see the header.
#include "userspace/attach/perf_uprobe.h"

#include <bpf/bpf.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "userspace/attach/preflight.h"

namespace torchprobe {
namespace {

// The uprobe PMU's type and the config bit that makes a uretprobe, read
// once from sysfs; -1 when the kernel has no uprobe PMU.
struct UprobePmu {
  int type = -1;
  int retprobe_bit = 0;
};

int ReadInt(const char* path, const char* format) {
  FILE* f = std::fopen(path, "re");
  if (!f) return -1;
  int value = -1;
  if (std::fscanf(f, format, &value) != 1) value = -1;
  std::fclose(f);
  return value;
}

const UprobePmu& Pmu() {
  static const UprobePmu pmu = [] {
    UprobePmu p;
    p.type = ReadInt(UprobePmuPath(), "%d");
    int bit = ReadInt("/sys/bus/event_source/devices/uprobe/format/retprobe", "config:%d");
    p.retprobe_bit = bit < 0 ? 0 : bit;  // 0 on every kernel that lacks the file
    return p;
  }();
  return pmu;
}

}  // namespace

int AttachPerfUprobe(int prog_fd, const std::string& path, uint64_t offset, uint64_t cookie,
                     bool retprobe, int pid) {
  const UprobePmu& pmu = Pmu();
  if (pmu.type < 0) return -ENOENT;
  perf_event_attr attr = {};
  attr.size = sizeof(attr);
  attr.type = static_cast<uint32_t>(pmu.type);
  attr.config = retprobe ? 1ull << pmu.retprobe_bit : 0;
  attr.config1 = reinterpret_cast<uint64_t>(path.c_str());  // uprobe_path
  attr.config2 = offset;                                    // probe_offset
  // A process-wide probe is opened on one CPU, as libbpf does: the uprobe
  // runs the program whichever CPU hits it.
  long perf_fd = syscall(SYS_perf_event_open, &attr, pid > 0 ? pid : -1, pid > 0 ? -1 : 0, -1,
                         PERF_FLAG_FD_CLOEXEC);
  if (perf_fd < 0) return -errno;
  LIBBPF_OPTS(bpf_link_create_opts, opts);
  opts.perf_event.bpf_cookie = cookie;
  int link_fd = bpf_link_create(prog_fd, static_cast<int>(perf_fd), BPF_PERF_EVENT, &opts);
  int err = link_fd < 0 ? -errno : 0;
  close(static_cast<int>(perf_fd));  // the link holds the event
  return link_fd < 0 ? err : link_fd;
}

}  // namespace torchprobe
