// Bounded, read-only reads of another process' memory (process_vm_readv):
// how userspace looks at what a probe saw only the address of.
#ifndef TORCHPROBE_BASE_REMOTE_MEMORY_H
#define TORCHPROBE_BASE_REMOTE_MEMORY_H

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace torchprobe {

// False when the range is not all readable (gone, unmapped, no permission).
inline bool ReadRemote(pid_t pid, uint64_t address, void* out, size_t size) {
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(address), size};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size);
}

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_REMOTE_MEMORY_H
