// A disk cache of op probe plans (FindOpProbes' result), for processes that
// take many short captures of the same libtorch: planning Debian's 1.13
// libtorch_cpu (ELF symbols, schema strings, disassembly for return sites)
// takes ~2 s of every `record`, the same 2 s each time. `torchprobe agent`
// turns it on for its windows, so that a triggered window starts within a
// second; plain `record` does not use it.
//
// On only when $TORCHPROBE_PLAN_CACHE names a folder, and only a folder of
// ours: owned by this user (root) and writable by no one else, else refused
// with one line (a cached offset becomes a breakpoint in every traced
// libtorch: whoever writes the cache chooses where). A plan is keyed by the
// image's device, inode, size, mtime and ctime (ns) and the format version
// below, so a rebuilt or replaced library is planned again (ctime: an inode
// reused by another file, or an mtime set back, gets a new key). And a
// cached plan is used only after it is checked against the image it is for:
// the entry holds the image's build-id and a hash of the first bytes at
// every probe site; a mismatch (another file behind the key, a file
// rewritten in place) drops the entry, says so in one line
// (kPlanCacheRejected) and plans again. Files are written atomically; one
// that does not read back whole is ignored (and replanned).
#ifndef TORCHPROBE_DISCOVER_PROBE_PLAN_CACHE_H
#define TORCHPROBE_DISCOVER_PROBE_PLAN_CACHE_H

#include <optional>
#include <string>

#include "userspace/discover/op_probes.h"

namespace torchprobe {

class ElfImage;

inline constexpr const char* kPlanCacheEnv = "TORCHPROBE_PLAN_CACHE";
// What the line says when a cached plan does not match its image (the agent
// counts these lines in its windows' logs).
inline constexpr const char* kPlanCacheRejected = "plan cache entry rejected";

// Creates `dir` (and its parents, mode 0700) when absent, then checks that it
// is a folder owned by us that no one else can write. False with a one-line
// *error.
bool PreparePlanCacheDir(const std::string& dir, std::string* error);

// The cache's folder: $TORCHPROBE_PLAN_CACHE when it is a folder of ours
// that no one else can write; "" when the cache is off or its folder is
// refused (said once on stderr). Other things worth keeping across short
// captures live there too (the probes' calibration: probe_cost_cache.h).
std::string PlanCacheFolder();

// The cache file for `elf_path` ("" when the cache is off, its folder is
// refused (said once on stderr), or the image cannot be stat'ed).
std::string PlanCachePath(const std::string& elf_path);

enum class CachedPlan { kNone, kLoaded, kMismatch };
// Reads a plan back and checks it against `image`: kNone when there is none
// (or it does not read whole), kMismatch when it is not `image`'s.
CachedPlan LoadProbePlan(const std::string& cache_path, const ElfImage& image, OpProbeSet* set);
// Writes it with `image`'s build-id and probe-site hash (errors are ignored:
// the cache only saves time).
void StoreProbePlan(const std::string& cache_path, const ElfImage& image, const OpProbeSet& set);

// The plan cached at `cache_path` for `image` (opened from `elf_path`), when
// there is one and it is `image`'s; one that is not is removed and said in
// one line (kPlanCacheRejected). nullopt: plan it (and StoreProbePlan).
std::optional<OpProbeSet> CachedProbePlan(const std::string& cache_path, const ElfImage& image,
                                          const std::string& elf_path);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_PROBE_PLAN_CACHE_H
