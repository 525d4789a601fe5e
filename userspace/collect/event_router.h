// Ring-buffer records -> the handlers that asked for their type. Each probe
// set registers the event types it decodes (its own structs in
// bpf/events.h); the router checks each record's size against its header
// and against what its handlers need, once, and skips (and counts) what no
// one asked for or what is too short, so an older reader survives a newer
// BPF object. Adding an event type adds a registration, not a virtual.
#ifndef TORCHPROBE_COLLECT_EVENT_ROUTER_H
#define TORCHPROBE_COLLECT_EVENT_ROUTER_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

#include "bpf/events.h"

namespace torchprobe {

struct DecodeStats {
  uint64_t decoded = 0;
  uint64_t unknown = 0;    // a type no handler asked for: skipped
  uint64_t malformed = 0;  // shorter than its header claims, or than its type
};

class EventRouter {
 public:
  // A record as it is in the ring: at least the size it was registered
  // with, `size` bytes in all (variable-length events: names).
  using RawHandler = std::function<void(const void* record, size_t size)>;

  // Each record of `types` to `on`, as an Event (copied: ring records are
  // 8-byte aligned only), after the handlers registered before it.
  // `on` is kept by value inside the one std::function a record goes
  // through (the hot path: one indirect call per handler, as a virtual).
  template <class Event, class Handler>
  void On(std::initializer_list<uint16_t> types, Handler on) {
    for (uint16_t type : types)
      OnRaw(type, sizeof(Event), [on](const void* record, size_t) {
        Event event;
        std::memcpy(&event, record, sizeof(Event));
        on(event);
      });
  }
  void OnRaw(uint16_t type, size_t min_size, RawHandler on);

  // Hands one record to its handlers; false (counted) when it is skipped.
  bool Route(const void* data, size_t size);
  const DecodeStats& stats() const { return stats_; }

  // The plain op entry at the start of an entry event that carries more.
  static tp_op_event EntryOf(const tp_op_event& op) {
    tp_op_event entry = op;
    entry.hdr.type = EV_OP_ENTER;
    entry.hdr.size = sizeof(entry);
    return entry;
  }

 private:
  struct TypeRoute {
    size_t min_size = 0;  // the largest any handler of the type needs
    std::vector<RawHandler> handlers;
  };
  static constexpr size_t kTypes = 64;  // event types are small numbers (bpf/events.h)
  std::array<TypeRoute, kTypes> routes_{};
  DecodeStats stats_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_COLLECT_EVENT_ROUTER_H
