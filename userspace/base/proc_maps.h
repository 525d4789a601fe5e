// What /proc says about a target process: its memory mappings (to find the
// libtorch it loaded and the path to open it from the host, containers
// included), its names, its threads and whether it still lives.
#ifndef TORCHPROBE_BASE_PROC_MAPS_H
#define TORCHPROBE_BASE_PROC_MAPS_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

// One line of /proc/PID/maps.
struct MapEntry {
  uint64_t start = 0;   // first virtual address
  uint64_t end = 0;     // one past the last
  uint64_t offset = 0;  // file offset of `start`
  std::string perms;    // "r-xp"
  std::string dev;      // "fd:01"
  uint64_t inode = 0;
  std::string path;     // "" for anonymous memory, "[heap]", or a file
};

// A file the process has mapped, and how the host can open it.
struct MappedImage {
  std::string path;               // as the process sees it (its mount namespace)
  std::string host_path;          // /proc/PID/root/<path>, or map_files/ if deleted
  std::vector<MapEntry> mappings; // every mapping of that file, in address order
};

// Parses the text of a maps file; lines it cannot read are skipped.
std::vector<MapEntry> ParseMaps(std::string_view text);

// Reads /proc/PID/maps ("no process with pid N", or permission denied).
StatusOr<std::vector<MapEntry>> ReadMaps(uint32_t pid);

// Where the bytes at `file_offset` of `image`'s file are in the process:
// the address inside the mapping that holds them, or none.
std::optional<uint64_t> MappedAddress(const MappedImage& image, uint64_t file_offset);

// Where `path`'s bytes at each of `offsets` are in process `pid`'s
// executable mappings of that very file (device and inode); 0 for an offset
// not mapped there, all 0 when the process is gone.
std::vector<uint64_t> MappedCodeAddresses(uint32_t pid, const std::string& path, const std::vector<uint64_t>& offsets);

// The first mapped file whose basename starts with `prefix` (e.g.
// "libtorch_cpu.so"); an error that names the process when there is none.
StatusOr<MappedImage> FindMappedImage(uint32_t pid, std::string_view prefix);

// Whether `path` is the very file `mapping` maps: the same device and inode
// (an inode number alone repeats across filesystems: a container's overlay
// or tmpfs and the host's).
bool IsMappedFile(const std::string& path, const MapEntry& mapping);

// A file's identity as "dev:inode" (the same library however a process
// names it, across mount namespaces); "" when it is gone.
std::string ImageIdentity(const std::string& host_path);

// Same search on already-read mappings (no error text, for tests and reuse).
bool FindImageInMaps(const std::vector<MapEntry>& maps, uint32_t pid, std::string_view prefix,
                     MappedImage* image);

// /proc/PID/comm without its newline; "" when the process is gone.
std::string ReadProcessComm(uint32_t pid);
// /proc/PID/cmdline with NULs as spaces; "" for kernel threads and the dead.
std::string ReadProcessCmdline(uint32_t pid);
// /proc/PID/task/TID/comm; "" when the thread is gone.
std::string ReadThreadComm(uint32_t pid, uint32_t tid);
// The thread ids in /proc/PID/task, ascending; empty when the process is gone.
std::vector<uint32_t> ListThreads(uint32_t pid);
bool IsProcessAlive(uint32_t pid);  // not gone, not a zombie, not exiting
// The parent's pid from /proc/PID/stat; 0 when the process is gone.
uint32_t ReadParentPid(uint32_t pid);
// The process (thread group) of thread `tid`; 0 when it is gone.
uint32_t ReadThreadGroup(uint32_t tid);
// The real uid of process `pid` (as this namespace sees it); 0 when gone.
uint32_t ReadProcessUid(uint32_t pid);
// The pid of the process ptrace-attached to thread `tid`; 0 when none or gone.
uint32_t ReadTracerPid(uint32_t tid);
// Whether `tid` is a thread of process `pid` now: /proc/PID/task/TID's Tgid
// (a tid read from task/ may have ended and been reused since).
bool IsThreadOf(uint32_t pid, uint32_t tid);
// Signal `signal` is pending for thread `tid` of `pid` itself (SigPnd, not
// the process' shared set); false when it is not, or the thread is gone.
bool IsSignalPending(uint32_t pid, uint32_t tid, int signal);
// Who a tracer is, for a message: "pid N (COMM), another torchprobe" when it
// runs torchprobe's own executable (a record, its keeper, an agent's window),
// else "pid N (COMM), a debugger?". `torchprobe`: its executable (this one).
std::string DescribeTracer(uint32_t tracer, const std::string& torchprobe = "/proc/self/exe");
// Every live descendant of `pid` (children, their children...), by pid.
std::vector<uint32_t> ListDescendants(uint32_t pid);
// The value of `name` in /proc/PID/environ (the environment it started
// with); "" when unset or unreadable.
std::string ReadProcessEnv(uint32_t pid, std::string_view name);
// The one-letter state of /proc/PID/stat ('R', 'S', 'T' stopped...); 0
// when the process is gone.
char ReadProcessState(uint32_t pid);

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_PROC_MAPS_H
