// Allocation events -> a per-process allocation table (the --memory probe
// set). Each allocation is joined to the op open on top of its thread's
// stack when it was made (the caller passes it: the op model sees the same
// thread's events in the same order), each free to its allocation. A free of
// memory allocated before tracing began is pre-existing: it never lowers the
// counter (which counts only what was allocated while tracing, so it cannot
// go negative), and its size is glibc's usable size from the chunk header
// the probe read before the free.
#ifndef TORCHPROBE_MODEL_MEMORY_MODEL_H
#define TORCHPROBE_MODEL_MEMORY_MODEL_H

#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>

#include "bpf/events.h"
#include "userspace/model/memory_sink.h"
#include "userspace/model/op_stack_model.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

class MemoryModel {
 public:
  MemoryModel(MemorySink* sink, TraceStats* stats) : sink_(sink), stats_(stats) {}
  // Also describes each process to `tracks` before its first event: its
  // memory tracks hang below it, though it may have run no op yet.
  MemoryModel(MemorySink* sink, TraceStats* stats, TraceSink* tracks, NameSource* names)
      : sink_(sink), stats_(stats), tracks_(tracks), names_(names) {}

  // `op_id`: the innermost open op of the event's thread, or kNoOp;
  // `python`: the Python stack it is under (--python-stacks), or null.
  void OnEvent(const tp_mem_event& event, uint32_t op_id, std::shared_ptr<const PythonStack> python = nullptr);
  // A device allocator's block malloc or free (its own totals come with it).
  void OnDeviceEvent(const tp_device_mem_event& event, uint32_t op_id,
                     std::shared_ptr<const PythonStack> python = nullptr);
  // Counts the allocations still alive (stats: memory_alive_at_end).
  void Finish();

  // glibc's usable bytes of the chunk whose size word is `chunk_word`; 0 if
  // the word does not look like one (not a malloc chunk, or unreadable).
  static uint64_t ChunkUsableBytes(uint64_t chunk_word);

 private:
  struct Allocation {
    uint64_t id = 0;
    uint64_t bytes = 0;
    uint64_t ts_ns = 0;
    uint32_t op_id = kNoOp;
  };
  struct Process {
    std::unordered_map<uint64_t, Allocation> live;  // by address
    std::map<std::pair<uint16_t, uint64_t>, Allocation> device_live;  // by (device, address)
    std::unordered_map<uint64_t, uint64_t> segments;  // cudaMalloc'd: address -> bytes
    uint64_t segment_bytes = 0;
    uint64_t allocated = 0;
    uint64_t next_id = 1;
  };

  Process& ProcessOf(uint32_t pid);
  void Alloc(Process& p, const tp_mem_event& event, uint32_t op_id, std::shared_ptr<const PythonStack> python);
  void Free(Process& p, const tp_mem_event& event, uint32_t op_id);
  void Segment(Process& p, const tp_mem_event& event, uint32_t op_id);

  MemorySink* sink_;
  TraceStats* stats_;
  TraceSink* tracks_ = nullptr;
  NameSource* names_ = nullptr;
  std::unordered_map<uint32_t, Process> processes_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_MEMORY_MODEL_H
