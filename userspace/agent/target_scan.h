// Which processes the agent samples: every process whose maps show
// libtorch_cpu.so, found by walking /proc. /proc lists every process of
// every PID namespace by its host pid, and maps name files as the process
// sees them, so containers need nothing special; their cgroup and namespace
// ids go into each window's index entry (the output's metadata).
#ifndef TORCHPROBE_AGENT_TARGET_SCAN_H
#define TORCHPROBE_AGENT_TARGET_SCAN_H

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace torchprobe {

// What a target is, read once when it is found.
struct TargetInfo {
  uint32_t pid = 0;
  uint64_t start_ticks = 0;  // /proc/PID/stat starttime: tells a reused pid apart
  std::string comm;
  std::string cmdline;
  std::string rank;       // RANK in its environment, "" when none
  std::string cgroup;     // its cgroup path (v2 line, else the first v1 line)
  std::string container;  // a 64-hex container id found in the cgroup path, "" if none
  uint64_t pid_ns = 0;    // inode of /proc/PID/ns/pid (differs from ours in a container)
  uint64_t mnt_ns = 0;    // inode of /proc/PID/ns/mnt
};

// The filters of `torchprobe agent` (--match-comm, --match-cgroup,
// --match-cmdline: ECMAScript regexes searched anywhere in the text; --pid).
struct TargetFilter {
  std::optional<std::regex> comm;
  std::optional<std::regex> cgroup;
  std::optional<std::regex> cmdline;
  std::vector<uint32_t> pids;  // empty: any
};

// Processes that map libtorch_cpu.so and pass the filter, ascending by pid;
// the agent's own process and its children (record) never map it.
std::vector<TargetInfo> ScanTargets(const TargetFilter& filter);

// Reads `pid`'s TargetInfo; false when it is gone.
bool ReadTargetInfo(uint32_t pid, TargetInfo* info);

// utime + stime of the whole process in ns (/proc/PID/stat), 0 when gone.
uint64_t ProcessCpuNs(uint32_t pid);
// starttime (clock ticks after boot) from /proc/PID/stat, 0 when gone.
uint64_t ProcessStartTicks(uint32_t pid);

// A container id (64 hex digits, as docker, containerd and CRI-O name their
// cgroups) in a cgroup path; "" when none.
std::string ContainerIdFromCgroup(const std::string& cgroup);

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_TARGET_SCAN_H
