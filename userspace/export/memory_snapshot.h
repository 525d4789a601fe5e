// --memory-snapshot FILE.pickle: the CUDA caching allocator's history as
// torch.cuda.memory._snapshot() pickles it after _record_memory_history(),
// which pytorch.org/memory_viz and torch.cuda._memory_viz open, made from
// outside the process: the allocator's block reports
// (c10::reportMemoryUsageToProfiler) and the runtime's cudaMalloc/cudaFree.
//
// What it holds, per process with device memory:
//  - device_traces[device]: alloc, free_requested and free_completed (one
//    free: the stream-deferred completion is not seen), segment_alloc and
//    segment_free, each {action, addr, size, stream 0, time_us (CLOCK_REALTIME),
//    frames}; frames are the Python stack (innermost first) with
//    --python-stacks, else empty.
//  - segments: the segments alive at the end, each with its blocks tiling
//    it: active_allocated for a live block, inactive for the gaps.
// A segment's device is the device of the blocks carved from it (a cudaMalloc
// names no device), else that of its thread's next block report.
// What the probes cannot see is left at a neutral value: stream 0, a
// block's requested_size its size, segment_pool_id (0, 0). Blocks of
// segments allocated before tracing began get a segment of their own each,
// so every block lies in a segment; how many is said in the pickle's own
// "torchprobe" dict (`blocks_outside_segments`), beside what memory_viz reads.
// Several processes: the first with device memory gets FILE, each other
// FILE with ".PID" before its ".pickle". With the memory categories
// (--shapes too), each alloc entry carries its `category` ("parameter",
// ..., lowercase as torch.profiler's _profile_to_snapshot writes it), which
// memory_viz colours by.
#ifndef TORCHPROBE_EXPORT_MEMORY_SNAPSHOT_H
#define TORCHPROBE_EXPORT_MEMORY_SNAPSHOT_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "userspace/base/atomic_file.h"
#include "userspace/model/memory_categories.h"
#include "userspace/model/memory_sink.h"

namespace torchprobe {

class MemorySnapshot : public MemorySink, public MemoryCategorySink {
 public:
  // nullptr and a one-line *error for a name not ending in .pickle or a file
  // that cannot be written. `realtime_offset_ns`: CLOCK_REALTIME minus CLOCK_MONOTONIC.
  static std::unique_ptr<MemorySnapshot> Open(const std::string& path, int64_t realtime_offset_ns,
                                              std::string* error);
  void AddMemoryEvent(const MemoryEvent& event) override;
  void AddMemoryCategories(const MemoryCategoryResult& result) override;
  // Writes each process' pickle (atomically); false with a one-line *error.
  // With no device memory seen, FILE holds an empty snapshot.
  bool Finish(std::string* error);

  // One process' snapshot, pickled.
  std::string Pickled(uint32_t pid);

 private:
  struct Trace {
    enum Action : uint8_t { kAlloc, kFree, kSegmentAlloc, kSegmentFree } action = kAlloc;
    uint64_t address = 0;
    uint64_t bytes = 0;
    uint64_t ts_ns = 0;
    uint32_t tid = 0;
    uint64_t id = 0;  // the memory model's allocation id (a block's)
    int device = -1;  // a segment's: found at the end
    std::shared_ptr<const PythonStack> python;
  };
  struct Block {
    uint64_t bytes = 0;
    std::shared_ptr<const PythonStack> python;
  };
  struct Process {
    std::vector<Trace> traces;                          // in arrival order
    std::map<std::pair<int, uint64_t>, Block> blocks;   // live, by (device, address)
    std::map<uint64_t, uint64_t> segments;              // live, address -> bytes
  };

  MemorySnapshot(std::unique_ptr<AtomicFile> file, std::string path, int64_t offset)
      : file_(std::move(file)), path_(std::move(path)), realtime_offset_ns_(offset) {}
  // Each segment trace's device (see the header); the device of each
  // segment address, as last allocated.
  static std::map<uint64_t, int> PlaceSegments(Process& p);

  std::unique_ptr<AtomicFile> file_;
  std::string path_;
  int64_t realtime_offset_ns_;
  std::map<uint32_t, Process> processes_;
  std::map<std::pair<uint32_t, uint64_t>, MemoryCategory> categories_;  // (pid, allocation id) -> at its allocation
  std::vector<uint32_t> order_;  // pids in the order their device memory was first seen
};

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_MEMORY_SNAPSHOT_H
