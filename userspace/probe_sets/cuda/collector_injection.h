// record --inject-cupti: the collector (libtorchprobe_cupti.so) loaded into
// a process that is already running, where CUDA_INJECTION64_PATH can no
// longer do it. The process' own thread is borrowed at the entry of a CUDA
// launch (its libcudart's, else its libcuda's: a point where it holds none
// of the loader's or malloc's locks and its CUDA context exists) to dlopen
// the collector and call torchprobe_cupti_attach(socket) there
// (attach/inject_library.h). Opt-in: it writes to the target's registers
// and stack, puts everything back, and leaves the collector loaded.
#ifndef TORCHPROBE_PROBE_SETS_COLLECTOR_INJECTION_H
#define TORCHPROBE_PROBE_SETS_COLLECTOR_INJECTION_H

#include <cstdint>
#include <string>

#include "userspace/base/status.h"

namespace torchprobe {

// Loads `collector` into `pid` and connects it to `socket_address` (the
// receiver's); how long the borrowed thread ran torchprobe's calls, ns (the
// window in which a SIGKILL of the injector's helper would strand it). An
// error is one line saying why (no CUDA library, debug registers that do
// not trap here, no launch within `launch_timeout_ns`, no safe /tmp for
// the copy, another CUPTI subscriber, ...); the target runs on as before
// either way.
StatusOr<uint64_t> InjectCollector(uint32_t pid, const std::string& collector, const std::string& socket_address,
                                   uint64_t launch_timeout_ns);

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_COLLECTOR_INJECTION_H
