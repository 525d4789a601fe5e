// What the memory model hands to a writer: one event per CPU allocation or
// free, already joined to its op and to the allocation it frees, with the
// process' allocated bytes after it (the counter).
#ifndef TORCHPROBE_MODEL_MEMORY_SINK_H
#define TORCHPROBE_MODEL_MEMORY_SINK_H

#include <cstdint>
#include <memory>
#include <vector>

#include "userspace/model/python_stack.h"

namespace torchprobe {

inline constexpr uint32_t kNoOp = UINT32_MAX;  // outside any op

// The alloc instants' arg that names the Python line it was made from.
inline constexpr const char* kMemoryPythonArg = "python";

struct MemoryEvent {
  enum Kind : uint8_t {
    kAlloc,            // memory allocated while tracing
    kFree,             // ... and freed
    kPreexistingFree,  // a free of memory allocated before tracing began
  };
  Kind kind = kAlloc;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t ts_ns = 0;      // CLOCK_MONOTONIC
  uint64_t address = 0;
  uint64_t bytes = 0;      // asked for; a pre-existing free: glibc's usable size, 0 if unknown
  uint64_t id = 0;         // allocation id, from 1 per process (a pre-existing free gets one too)
  uint32_t op_id = kNoOp;        // the innermost op open on the thread at this event
  uint32_t alloc_op_id = kNoOp;  // kFree: the op that allocated it (kAlloc: = op_id)
  uint64_t alloc_ts_ns = 0;      // kFree: when it was allocated
  uint64_t allocated = 0;  // the process' traced allocations still alive after this event;
                           // a device's: the allocator's own total, from before tracing too
  // Device memory (CUDA's caching allocator); CPU memory has type 0.
  uint8_t device_type = 0;   // c10::DeviceType
  int8_t device_index = -1;
  uint64_t reserved = 0;     // a device's: bytes its allocator holds (allocated + cached)
  bool segment = false;      // cudaMalloc/cudaFree: allocated is the process' cudaMalloc'd
                             // bytes while tracing (all devices)
  // --python-stacks, kAlloc: the Python stack it was made under (an op's
  // allocation: the op's); null when none is known.
  std::shared_ptr<const PythonStack> python;
};

class MemorySink {
 public:
  virtual ~MemorySink() = default;
  virtual void AddMemoryEvent(const MemoryEvent& event) = 0;
};

// Hands each event to every sink added (the trace, --memory-timeline).
class MemorySinks : public MemorySink {
 public:
  void Add(MemorySink* sink) { sinks_.push_back(sink); }
  void AddMemoryEvent(const MemoryEvent& event) override {
    for (MemorySink* sink : sinks_) sink->AddMemoryEvent(event);
  }

 private:
  std::vector<MemorySink*> sinks_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_MEMORY_SINK_H
