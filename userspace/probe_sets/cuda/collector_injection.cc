// The collector loaded into a running process; see the header.
#include "userspace/probe_sets/cuda/collector_injection.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string_view>
#include <vector>

#include "userspace/attach/hardware_breakpoints.h"
#include "userspace/attach/inject_library.h"
#include "userspace/attach/root_copy.h"
#include "userspace/base/proc_maps.h"
#include "userspace/cupti/record_stream.h"
#include "userspace/discover/remote_symbols.h"

namespace torchprobe {
namespace {

// Where a thread may be borrowed: the launch entries PyTorch's kernels go
// through, the runtime's first (a driver launch can run inside a runtime
// call that holds the runtime's locks). At most 4: the debug registers.
const std::vector<std::string_view> kRuntimeLaunches = {"cudaLaunchKernel", "cudaLaunchKernel_ptsz",
                                                        "cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz"};
const std::vector<std::string_view> kDriverLaunches = {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx",
                                                       "cuLaunchKernelEx_ptsz"};

constexpr std::string_view kCopyPrefix = "libtorchprobe_cupti-";
constexpr std::string_view kCopySuffix = ".so";
constexpr std::string_view kDeletedSuffix = " (deleted)";

StatusOr<std::vector<uint64_t>> LaunchEntries(uint32_t pid) {
  for (auto [library, names] : {std::pair{"libcudart.so", &kRuntimeLaunches}, std::pair{"libcuda.so", &kDriverLaunches}}) {
    StatusOr<std::vector<RemoteFunction>> found = FindRemoteFunctions(pid, library, *names);
    if (!found.ok() || found->empty()) continue;
    std::vector<uint64_t> entries;
    for (const RemoteFunction& f : *found) entries.push_back(f.address);
    return entries;
  }
  return Status::Error("it maps no CUDA runtime or driver with a kernel launch (libcudart.so, libcuda.so)");
}

bool SameBytes(const std::string& a, const std::string& b) {
  std::ifstream x(a, std::ios::binary), y(b, std::ios::binary);
  if (!x || !y) return false;
  return std::equal(std::istreambuf_iterator<char>(x), std::istreambuf_iterator<char>(),
                    std::istreambuf_iterator<char>(y), std::istreambuf_iterator<char>());
}

// The name a copy of this very collector was loaded under by an earlier
// run ("/tmp/libtorchprobe_cupti-<random>.so", removed since: its maps
// line says "(deleted)"); dlopen of that name finds it loaded by its name,
// without a look at the file system. "" when there is none.
std::string LoadedCopy(uint32_t pid, const std::string& collector) {
  StatusOr<std::vector<MapEntry>> maps = ReadMaps(pid);
  if (!maps.ok()) return "";
  for (const MapEntry& m : *maps) {
    std::string_view path = m.path;
    if (path.ends_with(kDeletedSuffix)) path.remove_suffix(kDeletedSuffix.size());
    std::string_view name = path.substr(path.rfind('/') + 1);
    if (!name.starts_with(kCopyPrefix) || !name.ends_with(kCopySuffix) || m.offset != 0) continue;
    char range[64];
    std::snprintf(range, sizeof(range), "%lx-%lx", static_cast<unsigned long>(m.start),
                  static_cast<unsigned long>(m.end));
    if (SameBytes("/proc/" + std::to_string(pid) + "/map_files/" + range, collector))
      return "/tmp/" + std::string(name);
  }
  return "";
}

// Turns the collector's answer (enum tpc_attach_status) into why not.
Status AttachStatus(int64_t value) {
  switch (value) {
    case TPC_ATTACH_OK: return Status::Ok();
    case TPC_ATTACH_NO_SOCKET: return Status::Error("the collector could not reach torchprobe's socket");
    case TPC_ATTACH_NO_CUPTI: return Status::Error("no CUPTI library in the process or for its loader");
    case TPC_ATTACH_BUSY: return Status::Error("another CUPTI subscriber (a profiler) owns the process");
    case TPC_ATTACH_SUBSCRIBE_FAILED: return Status::Error("cuptiSubscribe failed");
    case TPC_ATTACH_CALLBACKS_FAILED: return Status::Error("cuptiActivityRegisterCallbacks failed");
  }
  return Status::Error("the collector answered " + std::to_string(value));
}

}  // namespace

StatusOr<uint64_t> InjectCollector(uint32_t pid, const std::string& collector, const std::string& socket_address,
                                   uint64_t launch_timeout_ns) {
  StatusOr<std::vector<uint64_t>> entries = LaunchEntries(pid);
  if (!entries.ok()) return entries.status();
  // Where no breakpoint would ever trap, the target is not even seized.
  if (!HardwareBreakpointsTrap().ok()) return HardwareBreakpointsTrap();
  // The target opens the library from its own root: a chroot or container
  // that does not see ours gets a copy in its /tmp (attach/root_copy.h),
  // removed once loaded (the mapping stays, and a later run dlopens the
  // name it was loaded under: the same copy, not a second one).
  std::string identity = ImageIdentity(collector);
  if (identity.empty()) return Status::Error("no collector at " + collector);
  std::string path = collector;
  std::unique_ptr<RootCopy> copy;
  if (ImageIdentity("/proc/" + std::to_string(pid) + "/root" + collector) != identity)
    path = LoadedCopy(pid, collector);
  if (path.empty()) {
    StatusOr<std::unique_ptr<RootCopy>> made = RootCopy::Make(pid, collector, kCopyPrefix, kCopySuffix);
    if (!made.ok()) return Status::Error("cannot copy the collector into its root: " + made.status().message());
    copy = std::move(*made);
    path = copy->path();
  }
  StatusOr<DynamicLoaderCalls> calls = FindDynamicLoaderCalls(pid);
  if (!calls.ok()) return calls.status();
  InjectRequest request;
  request.pid = pid;
  request.dlopen = calls->dlopen;
  request.dlsym = calls->dlsym;
  request.dlerror = calls->dlerror;
  request.errno_location = calls->errno_location;
  request.safe_points = std::move(*entries);
  request.safe_point_what = "CUDA launch";
  request.library = path;
  request.function = TPC_ATTACH_FUNCTION;
  request.argument = socket_address;
  request.safe_point_timeout_ns = launch_timeout_ns;
  if (copy) {
    request.copy_dir_fd = copy->dir_fd();
    request.copy_name = copy->name();
  }
  StatusOr<InjectResult> result = InjectLibrary(request);
  if (!result.ok()) return result.status();
  Status attached = AttachStatus(result->value);
  if (!attached.ok()) return attached;
  return result->borrowed_ns;
}

}  // namespace torchprobe
