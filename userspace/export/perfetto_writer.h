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
//               clears incremental state and sets the defaults (clock
//               MONOTONIC, track = the thread's track) and interns the
//               category "aten" and the annotation names; op names and their
//               overload/schema strings are interned on first use.
#ifndef TORCHPROBE_EXPORT_PERFETTO_WRITER_H
#define TORCHPROBE_EXPORT_PERFETTO_WRITER_H

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "userspace/export/atomic_file.h"
#include "userspace/export/proto_encoder.h"
#include "userspace/model/slice_args.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

class PerfettoWriter : public TraceSink {
 public:
  // Creates the output's temp file now; nullptr and a one-line *error
  // ("cannot write x.pftrace: Permission denied") when that fails.
  static std::unique_ptr<PerfettoWriter> Open(const std::string& path, std::string* error);
  ~PerfettoWriter() override;  // without a successful Finish, no file appears

  void Begin(const OpTable& ops, const ClockSnapshot& clock) override;
  void AddOps(const OpTable& ops) override;
  void AddProcess(const ProcessInfo& process) override;
  void AddThread(const ThreadInfo& thread) override;
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override;
  bool Finish(const TraceStats& stats, std::string* error) override;

  // Where slices' extra arguments come from (CUDA calls'); none by default.
  void SetArgsSource(SliceArgsSource* source) { args_source_ = source; }

  uint64_t slices_written() const { return slices_written_; }
  uint64_t bytes_written() const { return bytes_encoded_ + encoder_.size(); }

  // Track uuids are deterministic, so other writers and tests can name them.
  static uint64_t ProcessUuid(uint32_t pid) { return (1ull << 60) | pid; }
  static uint64_t ThreadUuid(uint32_t pid, uint32_t tid) {
    return (2ull << 60) | (static_cast<uint64_t>(pid) << 30) | tid;
  }
  static constexpr uint64_t kStatsTrackUuid = (3ull << 60) | 1;
  static constexpr uint32_t kGlobalSequenceId = 1;
  // Name of the stats instant, of its track and of its one dict annotation,
  // whose entries are the TraceStats fields by name ("dropped_events", ...).
  static constexpr const char* kStatsEventName = "torchprobe";

 private:
  struct ThreadState {
    uint32_t pid = 0;
    uint32_t tid = 0;
    uint32_t sequence_id = 0;
    uint64_t last_ts = 0;           // timestamps on a track never go back
    std::vector<uint8_t> interned;  // per op id: name/overload/schema defined
  };
  struct OpenSlice {
    uint16_t depth;
    uint64_t end_ns;
  };

  explicit PerfettoWriter(std::unique_ptr<AtomicFile> file);
  ThreadState& Thread(uint32_t pid, uint32_t tid);
  const OpInfo& Op(uint32_t op_id);
  void WriteBegin(ThreadState& thread, const Slice& slice, uint64_t ts);
  void WriteEnd(ThreadState& thread, uint64_t ts);
  void MaybeFlush();
  void FlushEncoder();

  std::unique_ptr<AtomicFile> file_;
  ProtoEncoder encoder_;
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
  SliceArgsSource* args_source_ = nullptr;
  SliceArgs args_;  // scratch for WriteBegin
};

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_PERFETTO_WRITER_H
