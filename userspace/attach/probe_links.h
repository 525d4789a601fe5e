// The links that put an entry program on a set of functions of one ELF image
// and a return program on their return instructions. Closing them removes the probes: if torchprobe dies, the
// kernel closes them for us and the target goes on.
#ifndef TORCHPROBE_ATTACH_PROBE_LINKS_H
#define TORCHPROBE_ATTACH_PROBE_LINKS_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/status.h"

struct bpf_program;
struct bpf_link;

namespace torchprobe {

struct ProbeTarget {
  std::string path;               // host-openable path of the ELF image
  std::vector<uint64_t> offsets;  // file offsets of the functions
  std::vector<uint64_t> cookies;  // one per offset, seen by BPF as the attach cookie
  int pid = -1;                   // > 0: only this process; -1: every process
  bool retprobe = false;          // uretprobes at these offsets (bench floor only)
};

class ProbeLinks {
 public:
  ProbeLinks() = default;
  ~ProbeLinks() { DetachAll(); }
  ProbeLinks(ProbeLinks&& other) noexcept;
  ProbeLinks& operator=(ProbeLinks&& other) noexcept;
  ProbeLinks(const ProbeLinks&) = delete;
  ProbeLinks& operator=(const ProbeLinks&) = delete;

  // Attaches the returns first and the entries second, so that no op is seen
  // entering without its return being probed. `returns` may be null.
  static StatusOr<ProbeLinks> Attach(bpf_program* on_entry, const ProbeTarget& entries,
                                     bpf_program* on_return, const ProbeTarget* returns,
                                     bool use_uprobe_multi);

  // Entries go first, so that every op seen entering can still be seen
  // returning until DetachAll().
  void DetachEntries();
  void DetachAll();
  size_t probe_count() const { return probe_count_; }  // entry probes

 private:
  struct Group {
    std::vector<int> link_fds;         // uprobe_multi links
    std::vector<bpf_link*> links;      // per-symbol uprobes
    void Close();
  };
  Group entries_;
  Group returns_;
  size_t probe_count_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_PROBE_LINKS_H
