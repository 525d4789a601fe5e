// The links that put an entry program on a set of functions of one ELF image
// and a return program on their return instructions, for one process (or
// every process). Every link fd goes to the ProbeKeeper at once, so the
// probes come off cleanly however torchprobe ends (see probe_keeper.h);
// without a keeper (tests, tools) this object closes them itself.
#ifndef TORCHPROBE_ATTACH_PROBE_LINKS_H
#define TORCHPROBE_ATTACH_PROBE_LINKS_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/base/status.h"

struct bpf_program;

namespace torchprobe {

class ProbeKeeper;

struct ProbeTarget {
  std::string path;               // host-openable path of the ELF image
  std::vector<uint64_t> offsets;  // file offsets of the functions
  std::vector<uint64_t> cookies;  // one per offset, seen by BPF as the attach cookie
  int pid = -1;                   // > 0: only this process; -1: every process
  bool retprobe = false;          // uretprobes at these offsets (bench floor only)
  bool op_cookies = true;         // cookies are op ids (else: always removed first)
  bool guards_returns = false;    // the unwinder probe of uretprobe returns: removed only
                                  // once the keeper has let the process go (return_fixer.h)
};

class ProbeLinks {
 public:
  ProbeLinks() = default;
  ~ProbeLinks() { Detach(); }
  ProbeLinks(ProbeLinks&& other) noexcept;
  ProbeLinks& operator=(ProbeLinks&& other) noexcept;
  ProbeLinks(const ProbeLinks&) = delete;
  ProbeLinks& operator=(const ProbeLinks&) = delete;

  // Attaches the returns first and the entries second, so that no op is seen
  // entering without its return being probed. `returns` may be null. On
  // failure, what was attached is detached.
  static StatusOr<ProbeLinks> Attach(bpf_program* on_entry, const ProbeTarget& entries,
                                     bpf_program* on_return, const ProbeTarget* returns,
                                     bool use_uprobe_multi, ProbeKeeper* keeper);

  // Adds more entries with another program (their returns were in the
  // first Attach's); on failure those added so far stay, owned as the rest.
  Status AddEntries(bpf_program* on_entry, const ProbeTarget& entries, bool use_uprobe_multi);

  // Removes the probes: asks the keeper (returns at once; see its progress)
  // or closes them here. The BPF gate, not the order of removal, decides
  // what is recorded.
  void Detach();
  size_t probe_count() const { return probe_count_; }  // entry probes
  size_t link_count() const { return link_count_; }    // file descriptors

 private:
  Status AttachGroup(bpf_program* prog, const char* what, const ProbeTarget& target,
                     bool use_uprobe_multi);
  // `witness`: an address in `pid` where the link put a breakpoint (0: none).
  void Own(int fd, uint32_t op_id, int pid, uint64_t witness);

  ProbeKeeper* keeper_ = nullptr;
  uint32_t group_ = 0;         // the keeper's group of these links
  std::vector<int> fds_;       // closed here when there is no keeper
  size_t probe_count_ = 0;
  size_t link_count_ = 0;
};

// Where a lone function's probes go (not an op: one probe, hit often,
// removed first): the image (host path), the process (-1: every process), how.
struct FunctionPlace {
  std::string path;
  int pid = -1;
  bool use_uprobe_multi = true;
  ProbeKeeper* keeper = nullptr;
};

// `on_entry` at the function at file `offset` of `where` and, when
// `on_return` is given, it at each of `returns`.
StatusOr<ProbeLinks> AttachFunction(const FunctionPlace& where, bpf_program* on_entry, uint64_t offset,
                                    bpf_program* on_return = nullptr, const std::vector<uint64_t>& returns = {});

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_PROBE_LINKS_H
