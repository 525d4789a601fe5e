// Op events -> well-formed slices, one op stack per thread.
//
// Enter/return pairs become slices nested exactly as they ran. Each event
// carries its call's stack frame address (callers sit above callees), which
// decides nesting where an entry or a return was not seen. What the probes
// could not see is repaired and marked, never silently wrong:
//  - an op already running when the probes went live (or whose entry was
//    dropped) returns without an entry: it becomes a slice flagged
//    kSliceBeginUnseen that encloses the finished ops on deeper frames since
//    its last sibling, starting with the first of them (or with the trace,
//    when nothing on its level came before). The first `preamble_ns` of each
//    thread are held back so that it can enclose them; later, such a slice
//    starts after the thread's last emitted slice;
//  - an op still running at stop (or when its thread exits) is closed then,
//    flagged kSliceEndUnseen;
//  - an op whose return was not seen (a `ret` in code GCC moved to a cold
//    fragment, a longjmp) is closed, flagged, by the next call or return on
//    its frame or above;
//  - ops a C++ exception unwound are closed where it was caught, flagged
//    kSliceUnwound (not a repair: the op really ended there);
//  - with uretprobe returns, the open ops of a thread about to throw get
//    their return addresses back (EV_OP_RESTORED) and report no return: those
//    the exception unwound close at the catch as above; those it did not (it
//    was caught inside them) close, flagged, by the next call or return on
//    their frame or above, counted as returns_restored;
//  - an op that began before the trace and returned before all probes were
//    live (return probes go live first), or began after the entry probes
//    were removed at stop (return probes go last), is left out and counted.
// Annotation ranges (record_function) share the thread's stack: they begin
// and end by their record's address, not by frames (Python calls them; their
// frames say nothing of what runs inside), so the frame repairs above stop
// at an open range. A range still open at stop is closed and marked like an
// op; the ops and ranges still open inside a range when it ends are too.
// Finished top-level trees stream to the TraceSink in pre-order.
#ifndef TORCHPROBE_MODEL_OP_STACK_MODEL_H
#define TORCHPROBE_MODEL_OP_STACK_MODEL_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bpf/events.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

// Where process and thread names come from (/proc while the process lives).
class NameSource {
 public:
  virtual ~NameSource() = default;
  virtual ProcessInfo Process(uint32_t pid) = 0;
  virtual std::string Thread(uint32_t pid, uint32_t tid) = 0;  // "" if unknown
};

class OpStackModel {
 public:
  struct Options {
    uint64_t preamble_ns = 1'000'000'000;  // per thread, held back for begin repair
    size_t preamble_max_slices = 1 << 16;  // ... or until this many slices
  };
  OpStackModel(TraceSink* sink, NameSource* names, Options options);
  OpStackModel(TraceSink* sink, NameSource* names) : OpStackModel(sink, names, Options()) {}

  // The moment all op probes were live: the trace starts there. Returns of
  // ops whose entry was not seen are left out (and counted) before it.
  void SetStart(uint64_t start_ns) { start_ns_ = start_ns; }
  // The moment the entry probes began to be removed: returns seen after it
  // without a matching open op began after the trace and are left out.
  void SetStop(uint64_t stop_ns) { stop_ns_ = stop_ns; }
  uint64_t stop_ns() const { return stop_ns_; }
  void OnOpEvent(const tp_op_event& event);
  // `pid`'s ops return through `ret` probes under the keeper's guard: the
  // return addresses it gives back at a throw are another tracer's (see
  // probe_sets/ops/return_guard.h), so EV_OP_RESTORED says nothing about its ops.
  void ReturnsThroughRet(uint32_t pid) { ret_route_pids_.insert(pid); }
  // The same for the processes `other` knew of (a capture window's new model).
  void InheritReturnRoutes(const OpStackModel& other) { ret_route_pids_ = other.ret_route_pids_; }
  // A range named by `op_id` began on `tid`; `record` identifies it.
  void BeginRange(uint32_t pid, uint32_t tid, uint32_t op_id, uint64_t record, uint64_t ts_ns);
  // The range `record` that `tid` began ended (on any thread) at `ts_ns`.
  void EndRange(uint32_t pid, uint32_t tid, uint64_t record, uint64_t ts_ns);
  // --python-stacks: the ops and ranges `tid` enters from now on were
  // entered under `stack` (null: no Python frame).
  void SetPythonStack(uint32_t pid, uint32_t tid, uint64_t ts_ns, std::shared_ptr<const PythonStack> stack);
  // ... the stack `tid` is under now (null: none known).
  std::shared_ptr<const PythonStack> PythonStackOf(uint32_t pid, uint32_t tid) const;
  // --shapes: what the op `tid` just entered at `begin_ns` was called with.
  // False (nothing kept) when that entry opened no slice: a boxed call's
  // inner entry of the same op, or an entry left out.
  bool SetInputs(uint32_t pid, uint32_t tid, uint64_t begin_ns, std::shared_ptr<const OpInputs> inputs);
  // The arguments a probe set read at the entry of the op `tid` just
  // entered at `begin_ns` (a CUDA call's, a collective's). False likewise.
  bool SetArgs(uint32_t pid, uint32_t tid, uint64_t begin_ns, std::shared_ptr<const SliceArgs> args);
  // Describes `tid` (and its process) to the sink now if it was not: a
  // track beside its ops (--sched's states) may come before its first tree.
  void DescribeThread(uint32_t pid, uint32_t tid);
  // A thread exited: its open ops end there; its name is kept from `comm`.
  void OnThreadExit(uint32_t pid, uint32_t tid, uint64_t ts_ns, const char* comm);
  // Closes every open op at `end_ns` and hands everything to the sink.
  void FinishThreads(uint64_t end_ns);

  TraceStats& stats() { return stats_; }
  // The processes whose ops were seen, by pid, as named when first seen.
  std::vector<ProcessInfo> processes() const;
  // Entries seen per op id (index), so far.
  const std::vector<uint64_t>& op_calls() const { return op_calls_; }
  uint64_t start_ns() const { return start_ns_; }
  // The op on top of a thread's stack now (its innermost open op), or
  // UINT32_MAX when none is open: what an allocation is attributed to.
  uint32_t InnermostOp(uint32_t pid, uint32_t tid) const;
  // Every thread seen, with its open slices (ops and ranges, outermost
  // first) and when its last slice closed: what a stall report shows.
  struct OpenThread {
    uint32_t pid = 0;
    uint32_t tid = 0;
    std::vector<Slice> open;       // end_ns unset
    uint64_t last_closed_end = 0;  // 0: none closed
    uint64_t first_ns = 0;         // its first event
  };
  std::vector<OpenThread> OpenThreads() const;

 private:
  // The slice `tid` opened last, if it is still open and began at `begin_ns`.
  Slice* JustOpened(uint32_t pid, uint32_t tid, uint64_t begin_ns);
  struct ThreadState {
    uint32_t pid = 0;
    uint32_t tid = 0;
    std::string name;
    std::vector<Slice> forest;    // pre-order: finished trees held back + the open tree
    std::vector<uint32_t> open;   // indices into forest of the open ops, outermost first
    size_t restored = 0;          // open[0, restored) will report no return (EV_OP_RESTORED)
    std::vector<std::pair<uint32_t, uint64_t>> ranges;  // open ranges: (forest index, record)
    std::shared_ptr<const PythonStack> python;  // what the next entries were entered under
    uint64_t first_ts = 0;
    uint64_t last_closed_end = 0;   // end of the most recently closed slice
    uint64_t last_emitted_end = 0;  // end of the last top-level slice handed over
    bool in_preamble = true;
  };

  ThreadState& Thread(uint32_t pid, uint32_t tid, uint64_t ts_ns);
  // True if an open op of `t` was called at `frame`.
  bool Returns(const ThreadState& t, uint64_t frame) const;
  // True if an open call of `op_id` was made at `frame`.
  bool ReturnsOp(const ThreadState& t, uint32_t op_id, uint64_t frame) const;
  void Enter(ThreadState& t, uint32_t op_id, uint64_t frame, uint64_t ts_ns);
  // Opens a slice of `op_id` on `t`'s stack (after handing over what finished).
  void Push(ThreadState& t, uint32_t op_id, uint64_t frame, uint64_t ts_ns);
  void Exit(ThreadState& t, uint32_t op_id, uint64_t frame, uint64_t ts_ns);
  void ExitWithoutEntry(ThreadState& t, uint32_t op_id, uint64_t frame, uint64_t ts_ns);
  void Unwind(ThreadState& t, uint64_t catch_frame, uint64_t ts_ns);
  // Closes the open ops on frames below `frame` as returns lost, counted once.
  void CloseReturned(ThreadState& t, uint64_t frame, uint64_t ts_ns);
  // Closes, with `flags`, the open ops on frames below `frame`; returns how
  // many.
  size_t CloseBelow(ThreadState& t, uint64_t frame, uint64_t ts_ns, uint8_t flags);
  void CloseTop(ThreadState& t, uint64_t ts_ns, uint8_t flags);
  void MaybeEmit(ThreadState& t, uint64_t now_ns);
  void Emit(ThreadState& t);
  void Describe(ThreadState& t);

  TraceSink* sink_;
  NameSource* names_;
  Options options_;
  uint64_t start_ns_ = 0;
  uint64_t stop_ns_ = 0;  // 0: not stopping yet
  TraceStats stats_;
  std::unordered_map<uint64_t, ThreadState> threads_;
  std::unordered_set<uint32_t> ret_route_pids_;
  std::unordered_map<uint32_t, ProcessInfo> processes_;  // read when first seen
  std::unordered_set<uint32_t> described_pids_;
  std::unordered_set<uint64_t> described_threads_;
  std::unordered_map<uint64_t, std::string> exited_names_;  // for threads gone before described
  std::vector<Slice> scratch_;
  std::vector<uint64_t> op_calls_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_OP_STACK_MODEL_H
