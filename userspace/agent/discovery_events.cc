#include "userspace/agent/discovery_events.h"

#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>

#include "agent.skel.h"
#include "bpf/events.h"

namespace torchprobe {

DiscoveryEvents::~DiscoveryEvents() {
  if (ring_) ring_buffer__free(ring_);
  if (skel_) agent_bpf__destroy(skel_);
}

bool DiscoveryEvents::Start(std::string* error) {
  skel_ = agent_bpf__open_and_load();
  if (!skel_) {
    *error = std::string("cannot load the discovery programs: ") + std::strerror(errno);
    return false;
  }
  int err = agent_bpf__attach(skel_);
  if (err) {
    *error = std::string("cannot attach the discovery programs: ") + std::strerror(-err);
    return false;
  }
  ring_ = ring_buffer__new(bpf_map__fd(skel_->maps.agent_events), OnEvent, this, nullptr);
  if (!ring_) {
    *error = std::string("cannot read the discovery ring: ") + std::strerror(errno);
    return false;
  }
  return true;
}

int DiscoveryEvents::fd() const { return ring_ ? ring_buffer__epoll_fd(ring_) : -1; }

int DiscoveryEvents::OnEvent(void* self, void* data, size_t size) {
  auto* events = static_cast<DiscoveryEvents*>(self);
  if (size < sizeof(tp_agent_event)) return 0;
  const auto* e = static_cast<const tp_agent_event*>(data);
  if (e->hdr.type == EV_AGENT_EXEC) events->execs_.push_back(e->hdr.pid);
  return 0;
}

void DiscoveryEvents::Take(std::vector<uint32_t>* execs) {
  if (ring_) ring_buffer__consume(ring_);
  execs->swap(execs_);
  execs_.clear();
}

}  // namespace torchprobe
