// Checks made before anything is loaded, so that a missing privilege or
// kernel feature is one clear line instead of a libbpf errno later.
#ifndef TORCHPROBE_ATTACH_PREFLIGHT_H
#define TORCHPROBE_ATTACH_PREFLIGHT_H

#include "userspace/base/status.h"

namespace torchprobe {

// Loading BPF and attaching uprobes needs CAP_BPF and CAP_PERFMON (or
// CAP_SYS_ADMIN); reading another process' maps and ELF images needs
// CAP_SYS_PTRACE (or the same uid). Names what is missing.
Status CheckPrivileges();

// Path of the file that says the kernel has the uprobe PMU. Overridable with
// TORCHPROBE_UPROBE_PMU so tests can simulate a kernel without it.
const char* UprobePmuPath();

// Either uprobe_multi links or the uprobe PMU must exist; `want_multi` is
// false when the user forced per-symbol uprobes.
Status CheckUprobeSupport(bool want_multi);

// Per-symbol uprobes take one descriptor each (~12k for PyTorch 1.13): the
// soft limit on open files raised to the hard one.
void RaiseFileLimit();

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_PREFLIGHT_H
