// Where an exported function of a library that a process mapped is in that
// process' memory: the library found in its maps, the symbol's file offset
// read from the file (through /proc/PID/root, so a chroot or container
// works), placed by the mapping that holds that offset. What a tracer
// needs to set a breakpoint on a function, or to call one (attach/
// inject_library).
#ifndef TORCHPROBE_DISCOVER_REMOTE_SYMBOLS_H
#define TORCHPROBE_DISCOVER_REMOTE_SYMBOLS_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

// One function of a mapped library, as the process sees it.
struct RemoteFunction {
  std::string name;
  std::string library;  // the library's path in the process
  uint64_t address = 0;
};

// The address of `function` in the first library mapped by `pid` whose name
// starts with `library_prefix` ("libc.so.6"); an error that says which of
// the two is missing.
StatusOr<RemoteFunction> FindRemoteFunction(uint32_t pid, std::string_view library_prefix,
                                            std::string_view function);

// Those of `functions` the library has, in that order (maybe none); an
// error when it is not mapped.
// What an injection calls in the target: dlopen, dlsym and dlerror (libc
// from glibc 2.34 on, else libdl when loaded) and __errno_location (0 when
// not found: errno is then not kept). An error says why there is none.
struct DynamicLoaderCalls {
  uint64_t dlopen = 0, dlsym = 0, dlerror = 0, errno_location = 0;
};
StatusOr<DynamicLoaderCalls> FindDynamicLoaderCalls(uint32_t pid);

StatusOr<std::vector<RemoteFunction>> FindRemoteFunctions(uint32_t pid, std::string_view library_prefix,
                                                          const std::vector<std::string_view>& functions);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_REMOTE_SYMBOLS_H
