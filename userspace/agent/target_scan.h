// Which processes the agent samples: every process whose maps show
// libtorch_cpu.so loaded (an executable mapping), found by walking /proc.
// /proc lists every process of every PID namespace by its host pid, and maps
// name files as the process sees them, so containers need nothing special;
// their cgroup and namespace ids go into each window's index entry (the
// output's metadata).
//
// Everything read here is the target's to choose (any process can map a file
// named libtorch_cpu.so): the text is read bounded (kMaxCmdline, kMaxRank),
// the filters are RE2 expressions, linear in their input (libstdc++'s
// std::regex recurses once per character: a long command line ended the
// agent), and nothing here throws.
#ifndef TORCHPROBE_AGENT_TARGET_SCAN_H
#define TORCHPROBE_AGENT_TARGET_SCAN_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "userspace/base/proc_maps.h"

namespace re2 {
class RE2;
}

namespace torchprobe {

inline constexpr size_t kMaxCmdline = 4096;  // bytes of a command line read, matched and kept
inline constexpr size_t kMaxRank = 64;       // bytes of RANK kept

// What a target is, read once when it is found.
struct TargetInfo {
  uint32_t pid = 0;
  uint64_t start_ticks = 0;  // /proc/PID/stat starttime: tells a reused pid apart
  std::string comm;
  std::string cmdline;    // its first kMaxCmdline bytes, NULs as spaces
  std::string rank;       // RANK in its environment (first kMaxRank bytes), "" when none
  std::string job;        // its job's name (JobOf), "" when none
  std::string cgroup;     // its cgroup path (v2 line, else the first v1 line)
  std::string container;  // a 64-hex container id found in the cgroup path, "" if none
  uint64_t pid_ns = 0;    // inode of /proc/PID/ns/pid (differs from ours in a container)
  uint64_t mnt_ns = 0;    // inode of /proc/PID/ns/mnt
};

// The filters of `torchprobe agent` (--match-comm, --match-cgroup,
// --match-cmdline: RE2 expressions searched anywhere in the text; --pid).
struct TargetFilter {
  std::shared_ptr<const re2::RE2> comm;
  std::shared_ptr<const re2::RE2> cgroup;
  std::shared_ptr<const re2::RE2> cmdline;
  std::vector<uint32_t> pids;  // empty: any
};

// Compiles a filter's expression; nullptr when it is not valid RE2.
std::shared_ptr<const re2::RE2> CompileFilter(const std::string& expression);

// Says whether a process (pid, start time) is a target already.
using KnownTarget = std::function<bool(uint32_t pid, uint64_t start_ticks)>;

// Processes that map libtorch_cpu.so and pass the filter, ascending by pid;
// the agent's own process and its children (record) never map it. One that
// `known` says is a target already is listed by pid and start time only (not
// read again); of the others, those past the first `room` are not read
// further and only counted in *left_out.
std::vector<TargetInfo> ScanTargets(const TargetFilter& filter, const KnownTarget& known = nullptr,
                                    size_t room = SIZE_MAX, size_t* left_out = nullptr);

// A process that runs torchprobe's own executable (the same file: device
// and inode of an executable mapping, as `maps` names them): this agent, its
// window children and keepers, another agent, a `record`. Never a target.
bool IsTorchprobeProcess(const std::vector<MapEntry>& maps);

// The job a process belongs to, from its environment (each value's first
// kMaxRank bytes): `variable` when given, else TORCHELASTIC_RUN_ID (torchrun,
// TorchElastic), else MASTER_ADDR:MASTER_PORT (every rank of a job shares
// its rendezvous); "" when none is set.
std::string JobOf(uint32_t pid, const std::string& variable);

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
