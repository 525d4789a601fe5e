// Record validation and dispatch; see the header.
#include "userspace/collect/event_decoder.h"

#include <cstring>

namespace torchprobe {
namespace {

template <class Event>
bool Dispatch(const void* data, size_t size, DecodeStats* stats, Event* out) {
  if (size < sizeof(Event)) {
    ++stats->malformed;
    return false;
  }
  std::memcpy(out, data, sizeof(Event));  // ring records are 8-byte aligned; copy keeps it UB-free
  ++stats->decoded;
  return true;
}

// Decodes a record of type Event and hands it to `on`.
template <class Event, class Handler>
bool Deliver(const void* data, size_t size, DecodeStats* stats, Handler on) {
  Event event;
  if (!Dispatch(data, size, stats, &event)) return false;
  on(event);
  return true;
}

}  // namespace

bool DecodeRecord(const void* data, size_t size, EventHandler* handler, DecodeStats* stats) {
  tp_event_header header;
  if (size < sizeof(header)) {
    ++stats->malformed;
    return false;
  }
  std::memcpy(&header, data, sizeof(header));
  if (header.size > size || header.size < sizeof(header)) {
    ++stats->malformed;
    return false;
  }
  switch (header.type) {
    case EV_OP_ENTER:
    case EV_OP_EXIT:
    case EV_OP_UNWIND:
    case EV_OP_RESTORED: {
      tp_op_event event;
      if (!Dispatch(data, header.size, stats, &event)) return false;
      handler->OnOpEvent(event);
      return true;
    }
    case EV_BOXED_ENTER: {
      tp_boxed_event event;
      if (!Dispatch(data, header.size, stats, &event)) return false;
      handler->OnBoxedEvent(event);
      return true;
    }
    case EV_CUDA_CALL: {
      tp_cuda_call_event event;
      if (!Dispatch(data, header.size, stats, &event)) return false;
      handler->OnCudaCall(event);
      return true;
    }
    case EV_COLLECTIVE:
      return Deliver<tp_collective_event>(data, header.size, stats,
                                          [handler](const tp_collective_event& e) { handler->OnCollective(e); });
    case EV_AUTOGRAD_NODE:
      return Deliver<tp_autograd_node_event>(data, header.size, stats,
                                             [handler](const tp_autograd_node_event& e) { handler->OnAutogradNode(e); });
    case EV_OP_SHAPES:
      return Deliver<tp_op_shapes_event>(data, header.size, stats,
                                         [handler](const tp_op_shapes_event& e) { handler->OnOpShapes(e); });
    case EV_LIB_LOAD:
    case EV_PROC_FORK:
    case EV_PROC_EXEC:
    case EV_PROC_EXIT: {
      tp_proc_event event;
      if (!Dispatch(data, header.size, stats, &event)) return false;
      handler->OnProcEvent(event);
      return true;
    }
    case EV_MEM_ALLOC:
    case EV_MEM_FREE:
    case EV_SEGMENT_ALLOC:
    case EV_SEGMENT_FREE:
      return Deliver<tp_mem_event>(data, header.size, stats,
                                   [handler](const tp_mem_event& e) { handler->OnMemEvent(e); });
    case EV_DEVICE_MEM:
      return Deliver<tp_device_mem_event>(data, header.size, stats,
                                          [handler](const tp_device_mem_event& e) { handler->OnDeviceMemEvent(e); });
    case EV_ANNOT_BEGIN:
    case EV_ANNOT_END: {
      // An end carries no name: only the common part is required.
      tp_annot_begin event = {};
      size_t needed = header.type == EV_ANNOT_END ? sizeof(tp_annot_event) : sizeof(tp_annot_begin);
      if (header.size < needed) {
        ++stats->malformed;
        return false;
      }
      std::memcpy(&event, data, needed);
      if (event.a.name_len > sizeof(event.name)) event.a.name_len = sizeof(event.name);
      ++stats->decoded;
      handler->OnAnnotEvent(event);
      return true;
    }
    default:
      ++stats->unknown;
      return false;
  }
}

}  // namespace torchprobe
