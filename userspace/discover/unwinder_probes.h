// Where a process' C++ exceptions start walking its stack: the entry points
// of the unwinder it maps (libgcc_s), probed by the uretprobe returns route
// so that return addresses are given back before any walk sees a trampoline
// (bpf/uretprobe_returns.bpf.c).
#ifndef TORCHPROBE_DISCOVER_UNWINDER_PROBES_H
#define TORCHPROBE_DISCOVER_UNWINDER_PROBES_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

struct UnwinderProbes {
  std::string host_path;          // the unwinder library, openable from here
  std::vector<uint64_t> offsets;  // file offsets of its stack-walk entry points
};

// Every entry point that begins or resumes a walk with phase 1 or phase 2:
// a throw (_Unwind_RaiseException), a rethrow or std::rethrow_exception
// (_Unwind_Resume_or_Rethrow), the end of a cleanup (_Unwind_Resume),
// pthread_cancel and pthread_exit (_Unwind_ForcedUnwind). _Unwind_Backtrace
// is left out: it stops at a trampoline without harm.
inline constexpr const char* kUnwinderEntryPoints[] = {
    "_Unwind_RaiseException", "_Unwind_Resume_or_Rethrow", "_Unwind_Resume",
    "_Unwind_ForcedUnwind"};

// The unwinder `pid` maps, with every entry point found; an error when it
// maps none (then its exceptions cannot be made safe for uretprobes).
StatusOr<UnwinderProbes> FindUnwinderProbes(uint32_t pid);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_UNWINDER_PROBES_H
