// Streams the trace model as a Kineto-style Chrome trace JSON (what
// torch.profiler's export_chrome_trace writes; FORMATS.md section 3) for
// Holistic Trace Analysis, chrome://tracing and Perfetto's JSON importer.
//
// Every slice is one `ph:"X"` event, `cpu_op` or `user_annotation` by
// CategoryOf its name, on the OS pid/tid, with `ts`/`dur` in microseconds of
// CLOCK_MONOTONIC (`baseTimeNanoseconds` + ts * 1000 is Unix time). Its args
// `External id` and `Record function id` are both the slice's 1-based
// position in the order slices reach the writer: the same number
// ExecutionTraceWriter gives the slice as `rf_id`. `Sequence number` is left
// out while unknown, as Kineto does for ops outside autograd. Processes and
// threads get `ph:"M"` name events. `distributedInfo` carries the rank read
// from the first traced process's RANK (0 when it has none: a one-process
// job), `deviceProperties` is empty (the collector does not read the devices' properties). TraceStats go
// into a top-level "torchprobe_stats" object. Written through an AtomicFile:
// complete on Finish, or not at all.
#ifndef TORCHPROBE_EXPORT_CHROME_TRACE_WRITER_H
#define TORCHPROBE_EXPORT_CHROME_TRACE_WRITER_H

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "userspace/export/json_trace_file.h"
#include "userspace/model/gpu_sink.h"
#include "userspace/model/memory_sink.h"
#include "userspace/model/slice_args.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

class ChromeTraceWriter : public TraceSink, public GpuSink, public MemorySink {
 public:
  // Creates the temp file now; nullptr and a one-line *error when that fails.
  static std::unique_ptr<ChromeTraceWriter> Open(const std::string& path, std::string* error);

  void Begin(const OpTable& ops, const ClockSnapshot& clock) override;
  void AddOps(const OpTable& ops) override { ops_ = ops; }
  void AddProcess(const ProcessInfo& process) override;
  void AddThread(const ThreadInfo& thread) override;
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override;
  bool Finish(const TraceStats& stats, std::string* error) override;
  // CUDA calls' arguments (their `correlation` among them) go into their args.
  // Kineto's GPU layout: `kernel`/`gpu_memcpy`/`gpu_memset` on pid = device,
  // tid = stream, and an `ac2g` flow from the launching call (chrome_gpu.cc).
  void AddGpuActivity(const GpuActivity& activity) override;
  // --memory: Kineto's `[memory]` instant per allocation and free, as
  // profile_memory=True writes them (chrome_memory.cc).
  void AddMemoryEvent(const MemoryEvent& event) override;

  uint64_t bytes_written() const { return out_.bytes_written(); }

 private:
  explicit ChromeTraceWriter(std::unique_ptr<AtomicFile> file) : out_(std::move(file)), text_(out_.text()) {}
  void StartEvent();

  JsonTraceFile out_;
  JsonText& text_;  // out_.text()
  OpTable ops_;
  int64_t base_time_ns_ = 0;  // CLOCK_REALTIME - CLOCK_MONOTONIC at Begin
  uint64_t first_ts_ns_ = 0;
  int64_t rank_ = -1;         // of the first process described
  bool have_process_ = false;
  bool first_event_ = true;
  uint64_t next_rf_id_ = 1;
  std::vector<uint64_t> rf_ids_;  // scratch: the rf_id open at each depth
  std::vector<uint64_t> python_ids_;  // scratch: the Python frame open at each depth (0: none)
  uint64_t python_frames_ = 0;        // Python ids given out
  // Our correlation -> the External id of its launch's op: Kineto gives a
  // GPU event its launching op's, and HTA and Chakra's linker join on it.
  std::unordered_map<uint64_t, uint64_t> launch_external_ids_;
  std::vector<uint64_t> gpu_named_;  // devices and (device << 32 | stream) given name events
};

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_CHROME_TRACE_WRITER_H
