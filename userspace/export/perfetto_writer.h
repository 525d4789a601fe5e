// Streams the trace model as a Perfetto protobuf trace (.pftrace): a clock
// snapshot, process and thread track descriptors, every op as a SLICE_BEGIN /
// SLICE_END pair on its thread's track, and at the end one "torchprobe"
// instant whose debug annotations carry the TraceStats. Packets are encoded
// into a buffer and written in chunks through an AtomicFile, so a failed or
// abandoned trace leaves no partial file behind.
//
// Layout of the stream (see FORMATS.md section 1):
//   sequence 1: clock snapshot (BOOTTIME + MONOTONIC), track descriptors, the
//               stats instant (explicit timestamp_clock_id = MONOTONIC).
//   sequence 2, 3, ...: one per thread, in AddThread order. Its first packet
//               clears incremental state, declares the sequence's incremental
//               clock (equal to MONOTONIC at the trace's start), sets the
//               defaults (that clock, track = the thread's track) and interns
//               the category "aten" and the annotation names; op names and
//               their overload/schema strings are interned on first use, with
//               iids handed out in order of use (the busiest ops get 1-byte
//               iids).
//
// Size: an op slice is a BEGIN and an END packet (TrackEvent has no complete
// type), each with its length, a timestamp delta on the incremental clock
// (1-3 bytes for gaps under 2 ms) and the sequence id, which trace_processor
// needs to find the sequence's defaults and interned strings: ~11 bytes for
// an END, ~15 for a BEGIN with its category and name iids; the per-slice
// overload and schema annotations (interned) add 7 each. 33-40 bytes per
// slice (35.5 on PyTorch in `make bench`) is the floor that keeps the schema
// on every slice; 20 would mean dropping per-slice schema or sequence ids. Packets do not set
// SEQ_NEEDS_INCREMENTAL_STATE: that flag only tells a reader to skip them
// after packets were lost, and this writer loses none (it writes the file
// itself, not through a shared-memory buffer). --compress (Options) writes
// the same packets deflated into TracePacket.compressed_packets, a few bytes
// per slice.
#ifndef TORCHPROBE_EXPORT_PERFETTO_WRITER_H
#define TORCHPROBE_EXPORT_PERFETTO_WRITER_H

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "userspace/base/atomic_file.h"
#include "userspace/export/proto_encoder.h"
#include "userspace/model/gpu_sink.h"
#include "userspace/model/memory_categories.h"
#include "userspace/model/memory_sink.h"
#include "userspace/model/slice_args.h"
#include "userspace/model/thread_state.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

// trace_processor wants valid UTF-8 without NULs: anything else becomes '?'.
std::string CleanUtf8(std::string_view in);

class PerfettoWriter : public TraceSink,
                       public MemorySink,
                       public MemoryCategorySink,
                       public GpuSink,
                       public ThreadStateSink {
 public:
  // Creates the output's temp file now; nullptr and a one-line *error
  // ("cannot write x.pftrace: Permission denied") when that fails.
  struct Options {
    bool compress = false;  // chunks of packets zlib-deflated into compressed_packets
  };
  static std::unique_ptr<PerfettoWriter> Open(const std::string& path, std::string* error,
                                              Options options);
  static std::unique_ptr<PerfettoWriter> Open(const std::string& path, std::string* error) {
    return Open(path, error, Options());
  }
  ~PerfettoWriter() override;  // without a successful Finish, no file appears

  void Begin(const OpTable& ops, const ClockSnapshot& clock) override;
  void AddOps(const OpTable& ops) override;
  void AddProcess(const ProcessInfo& process) override;
  void AddThread(const ThreadInfo& thread) override;
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override;
  bool Finish(const TraceStats& stats, std::string* error) override;
  // --memory (perfetto_memory.cc): per process, a counter track of the bytes
  // allocated while tracing and still alive; each allocation and free an
  // instant "alloc"/"free" (category "memory") on its thread's track, inside
  // the op that made it, or on the process' "CPU allocations outside ops"
  // track. Args: bytes, address, id, op, alloc_op, allocated, pid, tid,
  // preexisting. Device memory (CUDA) has its own "cuda:N memory allocated"
  // and "... reserved" counter tracks per process, the allocator's totals,
  // and a "device" arg on its instants; cudaMalloc/cudaFree a "cudaMalloc
  // bytes" counter (while tracing, all devices) and instants of those names.
  void AddMemoryEvent(const MemoryEvent& event) override;
  // The bytes of each memory category over time: a counter track per
  // process, device and category ("CPU memory: PARAMETER").
  void AddMemoryCategories(const MemoryCategoryResult& result) override;
  // GPU activity (perfetto_gpu.cc): a "GPU N" track per device, a child
  // track per process and stream ("Stream 7"), a slice per kernel, copy and
  // fill (categories kernel, gpu_memcpy, gpu_memset, as Kineto's) with its
  // arguments, and a flow from the CPU launch slice (the one whose
  // kCorrelationArg is the activity's correlation) to the first activity it
  // made.
  void AddGpuActivity(const GpuActivity& activity) override;
  // --sched (perfetto_thread_state.cc): per thread, a "Thread state" track
  // under its thread's, with a slice per span of its times off the CPU
  // (model/thread_state.h: "Runnable (preempted)", "Blocked (S): futex",
  // "GIL wait", ...; category kThreadStateCategory, args pid and tid).
  void AddOffCpu(const OffCpu& off) override;

  // Where slices' extra arguments come from (CUDA calls'); none by default.

  uint64_t slices_written() const { return slices_written_; }
  // Bytes of the file so far (with compression: those already compressed).
  uint64_t bytes_written() const { return bytes_encoded_ + (options_.compress ? 0 : encoder_.size()); }

  // Track uuids are deterministic, so other writers and tests can name them.
  static uint64_t ProcessUuid(uint32_t pid) { return (1ull << 60) | pid; }
  static uint64_t ThreadUuid(uint32_t pid, uint32_t tid) {
    return (2ull << 60) | (static_cast<uint64_t>(pid) << 30) | tid;
  }
  static constexpr uint64_t kStatsTrackUuid = (3ull << 60) | 1;
  static uint64_t MemoryCounterUuid(uint32_t pid) { return (4ull << 60) | pid; }
  static uint64_t MemoryOutsideOpsUuid(uint32_t pid) { return (5ull << 60) | pid; }
  // A device's (device = type << 8 | index): allocated and reserved bytes.
  static uint64_t DeviceAllocatedUuid(uint32_t pid, uint16_t device) {
    return (6ull << 60) | (uint64_t{device} << 32) | pid;
  }
  static uint64_t DeviceReservedUuid(uint32_t pid, uint16_t device) {
    return (7ull << 60) | (uint64_t{device} << 32) | pid;
  }
  static uint64_t SegmentsUuid(uint32_t pid) { return (8ull << 60) | pid; }
  static uint64_t GpuUuid(uint32_t device) { return (9ull << 60) | device; }
  static uint64_t StreamUuid(uint32_t pid, uint32_t device, uint32_t stream) {
    return (10ull << 60) | (uint64_t{pid & 0x3fffff} << 36) | (uint64_t{device & 0xff} << 28) | (stream & 0xfffffff);
  }
  // A launch's flow: its correlation is unique in the trace (model/gpu_join).
  static uint64_t FlowId(uint64_t correlation) { return (11ull << 60) | correlation; }
  static uint64_t ThreadStateUuid(uint32_t pid, uint32_t tid) {
    return (12ull << 60) | (static_cast<uint64_t>(pid) << 30) | tid;
  }
  // A memory category's bytes (device -1: CPU).
  static uint64_t MemoryCategoryUuid(uint32_t pid, int device, int category) {
    return (13ull << 60) | (uint64_t{static_cast<uint8_t>(device + 1)} << 40) | (uint64_t(category) << 32) | pid;
  }
  static constexpr const char* kMemoryCounterName = "CPU memory allocated";
  static constexpr const char* kMemoryOutsideOpsName = "CPU allocations outside ops";
  static constexpr uint32_t kGlobalSequenceId = 1;
  // Name of the stats instant, of its track and of its one dict annotation,
  // whose entries are the TraceStats fields by name ("dropped_events", ...).
  static constexpr const char* kStatsEventName = "torchprobe";

 private:
  // A clock snapshot (BOOTTIME, MONOTONIC, and REALTIME when read) in the open packet.
  void WriteClocks(const ClockSnapshot& clock);
  struct ThreadState {
    uint32_t pid = 0;
    uint32_t tid = 0;
    uint32_t sequence_id = 0;
    uint64_t last_ts = 0;           // timestamps on a track never go back; the incremental
                                    // clock's value (each packet writes its delta)
    struct OpIids {
      uint32_t name = 0;  // 0: not interned on this sequence yet
      uint32_t overload = 0;
      uint32_t schema = 0;
    };
    std::vector<OpIids> iids;  // per op id
    uint32_t next_name_iid = 1;
    uint32_t next_string_iid = 1;
  };
  struct OpenSlice {
    uint16_t depth;
    uint64_t end_ns;
  };

  PerfettoWriter(std::unique_ptr<AtomicFile> file, Options options);
  ThreadState& Thread(uint32_t pid, uint32_t tid);
  const OpInfo& Op(uint32_t op_id);
  void WriteBegin(ThreadState& thread, const Slice& slice, uint64_t ts);
  void WriteEnd(ThreadState& thread, uint64_t ts);
  void DescribeMemoryTracks(uint32_t pid);
  void DescribeDeviceTracks(uint32_t pid, uint16_t device, const std::string& name);
  void WriteCounter(uint64_t ts_ns, uint64_t uuid, uint64_t value);
  // Tracks of the global sequence (perfetto_global_tracks.cc: GPU streams,
  // thread states): a track described once (`described` remembers), a
  // packet with an explicit MONOTONIC time, args of a track event, an end.
  void DescribeGlobalTrack(bool& described, uint64_t uuid, uint64_t parent, const std::string& name,
                     int32_t sibling_rank = -1);
  size_t BeginGlobalPacket(uint64_t ts_ns);
  void NumberArg(const char* name, uint64_t value);
  void TextArg(const char* name, const std::string& value);
  void EndGlobalSlice(uint64_t track, uint64_t ts_ns);
  void MaybeFlush();
  void FlushEncoder();
  // Appends encoder_'s packets to the file as they are or, compressing, as
  // one packet of compressed_packets.
  void WriteChunk();

  std::unique_ptr<AtomicFile> file_;
  Options options_;
  ProtoEncoder encoder_;
  ProtoEncoder compressed_;  // compressing: the outer packet
  OpTable ops_;
  ClockSnapshot clock_;
  bool begun_ = false;
  bool finished_ = false;
  std::unordered_map<uint32_t, bool> processes_;  // pid -> described
  std::unordered_map<uint64_t, ThreadState> threads_;  // (pid << 32 | tid)
  uint32_t next_sequence_id_ = kGlobalSequenceId + 1;
  std::vector<OpenSlice> stack_;  // scratch for AddSliceTree
  uint64_t slices_written_ = 0;
  uint64_t bytes_encoded_ = 0;  // already handed to file_
  uint64_t max_ts_ = 0;
  std::unordered_map<uint32_t, bool> memory_tracks_;  // pid -> described
  std::unordered_map<uint64_t, bool> device_tracks_;  // pid << 16 | device -> described
  std::unordered_map<uint32_t, bool> segment_tracks_;  // pid -> described
  std::unordered_map<uint64_t, bool> gpu_tracks_;      // GpuUuid / StreamUuid -> described
  std::unordered_map<uint64_t, bool> state_tracks_;    // ThreadStateUuid -> described
};

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_PERFETTO_WRITER_H
