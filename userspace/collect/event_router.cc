// Record validation and dispatch by type; see the header.
#include "userspace/collect/event_router.h"

#include <algorithm>
#include <memory>

namespace torchprobe {

void EventRouter::OnRaw(uint16_t type, size_t min_size, RawHandler on) {
  if (type >= kTypes) return;  // no such event: bpf/events.h numbers them below kTypes
  TypeRoute& route = routes_[type];
  route.min_size = std::max(route.min_size, min_size);
  route.handlers.push_back(std::move(on));
}

bool EventRouter::Route(const void* data, size_t size) {
  tp_event_header header;
  if (size < sizeof(header)) {
    ++stats_.malformed;
    return false;
  }
  std::memcpy(&header, data, sizeof(header));
  if (header.size > size || header.size < sizeof(header)) {
    ++stats_.malformed;
    return false;
  }
  if (header.type >= kTypes || routes_[header.type].handlers.empty()) {
    ++stats_.unknown;
    return false;
  }
  const TypeRoute& route = routes_[header.type];
  if (header.size < route.min_size) {
    ++stats_.malformed;
    return false;
  }
  ++stats_.decoded;
  for (const RawHandler& on : route.handlers) on(data, header.size);
  return true;
}

}  // namespace torchprobe
