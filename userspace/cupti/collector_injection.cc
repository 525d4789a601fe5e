// The collector loaded into a running process; see the header.
#include "userspace/cupti/collector_injection.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "userspace/attach/hardware_breakpoints.h"
#include "userspace/attach/inject_library.h"
#include "userspace/cupti/record_stream.h"
#include "userspace/discover/proc_maps.h"
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

bool CopyFile(const std::string& from, const std::string& to) {
  std::string temporary = to + ".partial";
  {
    std::ifstream in(from, std::ios::binary);
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << in.rdbuf();
    if (!in || !out) {
      unlink(temporary.c_str());
      return false;
    }
  }
  return rename(temporary.c_str(), to.c_str()) == 0;
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

Status InjectCollector(uint32_t pid, const std::string& collector, const std::string& socket_address,
                       uint64_t launch_timeout_ns) {
  StatusOr<std::vector<uint64_t>> entries = LaunchEntries(pid);
  if (!entries.ok()) return entries.status();
  // Where no breakpoint would ever trap, the target is not even seized.
  if (!HardwareBreakpointsTrap().ok()) return HardwareBreakpointsTrap();
  // The target opens the library from its own root: a chroot or container
  // that does not see ours gets a copy in its /tmp, removed once loaded
  // (the mapping stays; a later run's dlopen of that path finds it loaded).
  std::string root = "/proc/" + std::to_string(pid) + "/root";
  std::string identity = ImageIdentity(collector);
  std::string path = collector, copy;
  if (identity.empty()) return Status::Error("no collector at " + collector);
  if (ImageIdentity(root + collector) != identity) {
    std::string name = identity;
    for (char& c : name)
      if (c == ':') c = '-';
    path = "/tmp/libtorchprobe_cupti-" + name + ".so";
    copy = root + path;
    if (!CopyFile(collector, copy))
      return Status::Error("cannot copy the collector into the process' root (" + copy + ")");
  }
  InjectRequest request;
  request.pid = pid;
  request.safe_points = std::move(*entries);
  request.safe_point_what = "CUDA launch";
  request.library = path;
  request.function = TPC_ATTACH_FUNCTION;
  request.argument = socket_address;
  request.safe_point_timeout_ns = launch_timeout_ns;
  StatusOr<InjectResult> result = InjectLibrary(request);
  if (!copy.empty()) unlink(copy.c_str());
  if (!result.ok()) return result.status();
  return AttachStatus(result->value);
}

}  // namespace torchprobe
