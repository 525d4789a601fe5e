// Event-driven discovery for the agent (bpf/agent.bpf.c): the pids of
// processes that just exec'd, so that a new program that loads PyTorch as it
// starts (linked to libtorch, or a script that imports torch first thing) is
// found as it does, not at the next /proc walk. Loading can fail (no BTF, no
// CAP_BPF): the agent then says why and relies on its walks.
#ifndef TORCHPROBE_AGENT_DISCOVERY_EVENTS_H
#define TORCHPROBE_AGENT_DISCOVERY_EVENTS_H

#include <cstdint>
#include <string>
#include <vector>

struct agent_bpf;
struct ring_buffer;

namespace torchprobe {

class DiscoveryEvents {
 public:
  ~DiscoveryEvents();
  // Loads and attaches; false with *error when the kernel refuses.
  bool Start(std::string* error);
  // The ring buffer's epoll fd, for poll(); -1 before Start.
  int fd() const;
  // Pids that exec'd since the last call.
  void Take(std::vector<uint32_t>* execs);

 private:
  static int OnEvent(void* self, void* data, size_t size);
  agent_bpf* skel_ = nullptr;
  ring_buffer* ring_ = nullptr;
  std::vector<uint32_t> execs_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_DISCOVERY_EVENTS_H
