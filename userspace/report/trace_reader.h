// Reads a .pftrace back into a small model: per thread, its slices with name,
// overload, schema, begin/end (CLOCK_MONOTONIC ns), depth and parent, plus the
// torchprobe stats record. Streams packet by packet (each `0x0A len packet`),
// re-resolving interned strings per sequence and pairing SLICE_BEGIN/END per
// track. Used by `torchprobe report`, the writer tests and the parity test.
#ifndef TORCHPROBE_REPORT_TRACE_READER_H
#define TORCHPROBE_REPORT_TRACE_READER_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/model/trace_sink.h"

namespace torchprobe {

struct DecodedSlice {
  uint64_t begin_ns = 0;  // CLOCK_MONOTONIC ns
  uint64_t end_ns = 0;    // CLOCK_MONOTONIC ns; the thread's last time if !ended
  uint32_t op = 0;        // index into DecodedTrace::ops
  uint16_t depth = 0;     // 0 for a top-level slice
  int32_t parent = -1;    // index into the thread's slices, -1 at top level
  bool repaired_begin = false;  // annotation repaired_begin
  bool repaired_end = false;    // annotation repaired_end
  bool unwound = false;         // annotation unwound: a caught exception ended it
  bool ended = true;            // false: no SLICE_END in the file
  int32_t python_line = -1;     // --python-stacks: the line of the innermost frame it was called from
  int32_t caller_line = -1;     // a Python frame's: the line its caller called it from
  int32_t input_dims = -1;      // --shapes: its "Input Dims" text, an index into DecodedTrace::input_dims
};

struct DecodedThread {
  uint32_t pid = 0;
  uint32_t tid = 0;
  std::string name;
  uint64_t track_uuid = 0;
  std::vector<DecodedSlice> slices;  // in begin order (pre-order)
};

struct DecodedProcess {
  uint32_t pid = 0;
  std::string name;
  std::string cmdline;
};

// One "alloc"/"free" instant of the memory tracks (--memory; see
// PerfettoWriter::AddMemoryEvent).
struct DecodedMemoryEvent {
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC ns
  uint32_t pid = 0;
  uint32_t tid = 0;
  bool alloc = false;        // else a free
  bool preexisting = false;  // a free of memory allocated before the trace
  uint64_t bytes = 0;
  uint64_t address = 0;
  uint64_t id = 0;           // allocation id, per process
  uint64_t allocated = 0;    // the process' counter after it
  uint64_t alloc_ts_ns = 0;  // a free: when it was allocated
  std::string op;            // the op open on its thread ("" outside ops)
  std::string alloc_op;      // a free: the op that allocated it
  std::string python;        // an alloc, --python-stacks: "FILE(LINE): FUNCTION" it was made from
  std::string device;        // "" for CPU memory, else "cuda:0", ...
  uint64_t reserved = 0;     // a device's: its allocator's reserved bytes after it
};

// A kernel, copy or fill on a GPU stream track (--cupti; see
// PerfettoWriter::AddGpuActivity and ChromeTraceWriter's Kineto layout).
struct DecodedGpuActivity {
  uint64_t begin_ns = 0;  // CLOCK_MONOTONIC ns
  uint64_t end_ns = 0;
  std::string name;
  std::string category;  // "kernel", "gpu_memcpy", "gpu_memset"
  uint32_t device = 0;
  uint32_t stream = 0;
  uint64_t track = 0;    // its stream track (the same stream of two processes: two tracks)
  std::string op;        // the op that launched it ("" unknown)
  uint64_t correlation = 0;  // 0: joined to no CPU launch
};

// One span of a thread-state track (--sched; model/thread_state.h).
struct DecodedThreadState {
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t begin_ns = 0;  // CLOCK_MONOTONIC ns
  uint64_t end_ns = 0;
  std::string name;       // "Runnable (preempted)", "Blocked (S): futex", "GIL wait", ...
};

// Whether a slice of this category is a GPU activity.
inline bool IsGpuCategory(const std::string& category) {
  return category == "kernel" || category == "gpu_memcpy" || category == "gpu_memset";
}

// A memory category's bytes after a change (PerfettoWriter::AddMemoryCategories).
struct DecodedCategoryBytes {
  uint32_t pid = 0;
  std::string device;    // "CPU", "cuda:0"
  std::string category;  // "PARAMETER", ..., "unknown"
  uint64_t ts_ns = 0;    // CLOCK_MONOTONIC
  uint64_t bytes = 0;
};

struct DecodedTrace {
  OpTable ops;  // distinct (name, overload, schema), in order of first use
  std::vector<DecodedProcess> processes;  // in file order
  std::vector<DecodedThread> threads;     // in file order
  std::vector<DecodedMemoryEvent> memory;  // in file order (time order per process)
  std::vector<DecodedGpuActivity> gpu;     // in file order (start order per stream)
  std::vector<DecodedThreadState> thread_states;  // in file order (time order per thread)
  std::vector<DecodedCategoryBytes> memory_categories;  // in file order (time order per track)
  std::vector<std::string> input_dims;  // the distinct "Input Dims" texts of the slices (--shapes)
  bool has_clock_snapshot = false;
  ClockSnapshot clock;
  bool has_stats = false;  // the "torchprobe" instant was found
  TraceStats stats;
  uint64_t packets = 0;
  uint64_t unmatched_ends = 0;   // SLICE_END with no open slice on its track
  uint64_t unterminated = 0;     // SLICE_BEGIN with no SLICE_END
  uint64_t dropped_packets = 0;  // packets flagged previous_packet_dropped
  uint64_t file_size = 0;        // bytes
  // The file ends inside a packet (its writer, or a copy, did not finish):
  // everything before that packet was read; slices it cut open are counted in
  // `unterminated`.
  bool truncated = false;
  uint64_t truncated_at = 0;  // byte offset of the incomplete packet

  const DecodedThread* FindThread(uint32_t pid, uint32_t tid) const;
  size_t slice_count() const;
};

// Returns false with a one-line *error for a missing or unreadable file, an
// empty file, a file that is not a Perfetto trace, a packet that does not
// parse, or a file cut inside its first packet. A file cut later is read up
// to the cut and marked `truncated`, as Perfetto's trace_processor reads it.
bool ReadTrace(const std::string& path, DecodedTrace* trace, std::string* error);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_TRACE_READER_H
