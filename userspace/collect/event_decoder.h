// Raw ring-buffer records -> typed events. Checks sizes against the shared
// header and skips (and counts) what it does not know, so an older reader
// survives a newer BPF object.
#ifndef TORCHPROBE_COLLECT_EVENT_DECODER_H
#define TORCHPROBE_COLLECT_EVENT_DECODER_H

#include <cstddef>
#include <cstdint>

#include "bpf/events.h"

namespace torchprobe {

class EventHandler {
 public:
  // The plain op entry inside an entry event that carries more.
  static tp_op_event EntryOf(const tp_op_event& op) {
    tp_op_event entry = op;
    entry.hdr.type = EV_OP_ENTER;
    entry.hdr.size = sizeof(entry);
    return entry;
  }
  virtual ~EventHandler() = default;
  virtual void OnOpEvent(const tp_op_event& event) = 0;
  virtual void OnProcEvent(const tp_proc_event& event) = 0;
  // EV_MEM_ALLOC / EV_MEM_FREE, EV_SEGMENT_ALLOC / EV_SEGMENT_FREE
  // (--memory); ignored by handlers without it.
  virtual void OnMemEvent(const tp_mem_event& event) {}
  // EV_DEVICE_MEM (--memory): a device allocator's block malloc or free.
  virtual void OnDeviceMemEvent(const tp_device_mem_event& event) {}
  // The boxed path's entries; a handler that traces no boxed copy never
  // receives one.
  virtual void OnBoxedEvent(const tp_boxed_event& event) {}
  // EV_ANNOT_BEGIN and EV_ANNOT_END (whose name part is zero).
  virtual void OnAnnotEvent(const tp_annot_begin& event) {}
  // A CUDA/NCCL call's entry with its arguments; by default only the entry.
  virtual void OnCudaCall(const tp_cuda_call_event& event) {
    tp_op_event entry = event.op;
    entry.hdr.type = EV_OP_ENTER;
    entry.hdr.size = sizeof(entry);
    OnOpEvent(entry);
  }
  // A c10d collective's entry with its group and tensors; by default only the entry.
  virtual void OnCollective(const tp_collective_event& event) { OnOpEvent(EntryOf(event.op)); }
  // Autograd's engine entered for a node; by default only the entry.
  virtual void OnAutogradNode(const tp_autograd_node_event& event) { OnOpEvent(EntryOf(event.op)); }
  // --shapes: an op's entry with its Tensor arguments; by default only the entry.
  virtual void OnOpShapes(const tp_op_shapes_event& event) {
    tp_op_event entry = event.op;
    entry.hdr.type = EV_OP_ENTER;
    entry.hdr.size = sizeof(entry);
    OnOpEvent(entry);
  }
};

struct DecodeStats {
  uint64_t decoded = 0;
  uint64_t unknown = 0;    // a type this reader does not know: skipped
  uint64_t malformed = 0;  // shorter than its header claims, or than its type
};

// Decodes one record. Never throws; returns false for a skipped record.
bool DecodeRecord(const void* data, size_t size, EventHandler* handler, DecodeStats* stats);

}  // namespace torchprobe

#endif  // TORCHPROBE_COLLECT_EVENT_DECODER_H
