// Privilege and kernel-feature checks; see the header.
#include "userspace/attach/preflight.h"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "userspace/attach/uprobe_multi.h"

namespace torchprobe {
namespace {

constexpr int kCapSysAdmin = 21;
constexpr int kCapSysPtrace = 19;
constexpr int kCapPerfmon = 38;
constexpr int kCapBpf = 39;

bool HasCapability(const __user_cap_data_struct (&data)[2], int cap) {
  return data[cap / 32].effective & (1u << (cap % 32));
}

}  // namespace

Status CheckPrivileges() {
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0)
    return Status::Error("cannot read this process' capabilities");
  std::string missing;
  auto need = [&](bool ok, const char* what) {
    if (ok) return;
    if (!missing.empty()) missing += ", ";
    missing += what;
  };
  bool admin = HasCapability(data, kCapSysAdmin);
  need(admin || HasCapability(data, kCapBpf), "CAP_BPF");
  need(admin || HasCapability(data, kCapPerfmon), "CAP_PERFMON");
  need(HasCapability(data, kCapSysPtrace), "CAP_SYS_PTRACE");
  if (missing.empty()) return Status::Ok();
  return Status::Error("torchprobe must run as root: missing " + missing);
}

const char* UprobePmuPath() {
  const char* path = std::getenv("TORCHPROBE_UPROBE_PMU");
  return path ? path : "/sys/bus/event_source/devices/uprobe/type";
}

Status CheckUprobeSupport(bool want_multi) {
  if (want_multi && HaveUprobeMulti()) return Status::Ok();
  if (access(UprobePmuPath(), R_OK) == 0) return Status::Ok();
  return Status::Error(std::string("kernel without the uprobe PMU (") + UprobePmuPath() +
                       " missing)" +
                       (want_multi ? " and without uprobe_multi links: cannot probe user code"
                                   : ": per-symbol uprobes need it"));
}

void RaiseFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace torchprobe
