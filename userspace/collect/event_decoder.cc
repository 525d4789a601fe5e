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
    case EV_CUDA_CALL: {
      tp_cuda_call_event event;
      if (!Dispatch(data, header.size, stats, &event)) return false;
      handler->OnCudaCall(event);
      return true;
    }
    case EV_LIB_LOAD:
    case EV_PROC_FORK:
    case EV_PROC_EXIT: {
      tp_proc_event event;
      if (!Dispatch(data, header.size, stats, &event)) return false;
      handler->OnProcEvent(event);
      return true;
    }
    default:
      ++stats->unknown;
      return false;
  }
}

}  // namespace torchprobe
