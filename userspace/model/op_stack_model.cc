// Per-thread op stacks and their repair; see the header.
#include "userspace/model/op_stack_model.h"

#include <algorithm>
#include <cstring>

namespace torchprobe {
namespace {

uint64_t ThreadKey(uint32_t pid, uint32_t tid) { return (uint64_t{pid} << 32) | tid; }

// A range's frame: above every real one, so no call or return "on its frame
// or above" closes it, and the frame repairs stop at it.
constexpr uint64_t kRangeFrame = ~uint64_t{0};

}  // namespace

OpStackModel::OpStackModel(TraceSink* sink, NameSource* names, Options options)
    : sink_(sink), names_(names), options_(options) {}

OpStackModel::ThreadState& OpStackModel::Thread(uint32_t pid, uint32_t tid, uint64_t ts_ns) {
  auto [it, inserted] = threads_.try_emplace(ThreadKey(pid, tid));
  ThreadState& t = it->second;
  if (inserted) {
    t.pid = pid;
    t.tid = tid;
    t.first_ts = ts_ns;
    // Read the names now, while the thread surely lives: trees may be
    // handed over after the process has exited.
    t.name = names_->Thread(pid, tid);
    if (!processes_.count(pid)) processes_.emplace(pid, names_->Process(pid));
  }
  return t;
}

void OpStackModel::OnOpEvent(const tp_op_event& in) {
  ++stats_.events;
  tp_op_event event = in;
  bool shared_return = event.op_id & TP_COOKIE_SHARED_RET;
  event.op_id &= ~TP_COOKIE_SHARED_RET;
  ThreadState& t = Thread(event.hdr.pid, event.hdr.tid, event.hdr.ts_ns);
  // A `ret` shared with other callers (reached by tail call) is this op's
  // return only when it closes an open call of it on that frame.
  if (shared_return && event.hdr.type == EV_OP_EXIT && !ReturnsOp(t, event.op_id, event.frame)) {
    ++stats_.foreign_returns;
    return;
  }
  // Returns go live before entries and are removed after them: a return
  // with no entry seen, before the start or after the stop, belongs to an op
  // that ran outside the trace. Only returns at those edges need the stack.
  bool before = event.hdr.ts_ns < start_ns_;
  bool after = stop_ns_ && event.hdr.ts_ns >= stop_ns_;
  if (event.hdr.type == EV_OP_EXIT && (before || after) && !Returns(t, event.frame)) {
    ++(before ? stats_.before_start : stats_.after_stop);
    return;
  }
  if (event.hdr.type == EV_OP_ENTER)
    Enter(t, event.op_id, event.frame, event.hdr.ts_ns);
  else if (event.hdr.type == EV_OP_UNWIND)
    Unwind(t, event.frame, event.hdr.ts_ns);
  else if (event.hdr.type == EV_OP_RESTORED && !ret_route_pids_.count(event.hdr.pid))
    t.restored = t.open.size();  // every open op: the kernel's list is this thread's stack
  else if (event.hdr.type == EV_OP_RESTORED)
    return;  // a `ret`-route process: someone else's trampolines; its ops still return
  else
    Exit(t, event.op_id, event.frame, event.hdr.ts_ns);
}

void OpStackModel::Unwind(ThreadState& t, uint64_t catch_frame, uint64_t ts_ns) {
  // The handler's function called __cxa_begin_catch from `catch_frame`: every
  // open op called from there or below was unwound by the exception.
  stats_.unwound += CloseBelow(t, catch_frame + 1, ts_ns, kSliceUnwound);
  if (t.open.empty()) MaybeEmit(t, ts_ns);
}

size_t OpStackModel::CloseBelow(ThreadState& t, uint64_t frame, uint64_t ts_ns, uint8_t flags) {
  size_t closed = 0;
  for (; !t.open.empty() && t.forest[t.open.back()].frame < frame; ++closed)
    CloseTop(t, ts_ns, flags);
  return closed;
}

void OpStackModel::CloseReturned(ThreadState& t, uint64_t frame, uint64_t ts_ns) {
  // A call or return at `frame` means whatever ran at or below it before has
  // returned; ops still open there lost their return (a `ret` in a cold
  // fragment, a longjmp, an uncaught unwind), or were given their return
  // address back before an exception that did not unwind them.
  size_t restored = t.restored;
  size_t closed = CloseBelow(t, frame, ts_ns, kSliceEndUnseen);
  size_t was_restored = restored - t.restored;
  stats_.returns_restored += was_restored;
  if (closed > was_restored) ++stats_.mismatched_exits;
}

bool OpStackModel::ReturnsOp(const ThreadState& t, uint32_t op_id, uint64_t frame) const {
  for (uint32_t index : t.open)
    if (t.forest[index].frame == frame && t.forest[index].op_id == op_id) return true;
  return false;
}

bool OpStackModel::Returns(const ThreadState& t, uint64_t frame) const {
  for (uint32_t index : t.open)
    if (t.forest[index].frame == frame) return true;
  return false;
}

void OpStackModel::Enter(ThreadState& t, uint32_t op_id, uint64_t frame, uint64_t ts_ns) {
  // A new call at the frame of an open op: that op returned unseen.
  CloseReturned(t, frame + 1, ts_ns);
  Push(t, op_id, frame, ts_ns);
}

void OpStackModel::Push(ThreadState& t, uint32_t op_id, uint64_t frame, uint64_t ts_ns) {
  if (t.open.empty()) MaybeEmit(t, ts_ns);
  if (op_id >= op_calls_.size()) op_calls_.resize(op_id + 1, 0);
  ++op_calls_[op_id];
  Slice slice;
  slice.begin_ns = ts_ns;
  slice.op_id = op_id;
  slice.frame = frame;
  slice.depth = static_cast<uint16_t>(t.open.size());
  slice.python = t.python;
  t.open.push_back(static_cast<uint32_t>(t.forest.size()));
  t.forest.push_back(slice);
}

Slice* OpStackModel::JustOpened(uint32_t pid, uint32_t tid, uint64_t begin_ns) {
  auto it = threads_.find(ThreadKey(pid, tid));
  if (it == threads_.end() || it->second.open.empty()) return nullptr;
  Slice& top = it->second.forest[it->second.open.back()];
  return top.begin_ns == begin_ns ? &top : nullptr;
}

void OpStackModel::SetPythonStack(uint32_t pid, uint32_t tid, uint64_t ts_ns,
                                  std::shared_ptr<const PythonStack> stack) {
  Thread(pid, tid, ts_ns).python = std::move(stack);
}

bool OpStackModel::SetInputs(uint32_t pid, uint32_t tid, uint64_t begin_ns,
                             std::shared_ptr<const OpInputs> inputs) {
  Slice* slice = JustOpened(pid, tid, begin_ns);
  if (slice) slice->inputs = std::move(inputs);
  return slice != nullptr;
}

bool OpStackModel::SetArgs(uint32_t pid, uint32_t tid, uint64_t begin_ns, std::shared_ptr<const SliceArgs> args) {
  Slice* slice = JustOpened(pid, tid, begin_ns);
  if (slice) slice->args = std::move(args);
  return slice != nullptr;
}

void OpStackModel::BeginRange(uint32_t pid, uint32_t tid, uint32_t op_id, uint64_t record,
                              uint64_t ts_ns) {
  ++stats_.events;
  ThreadState& t = Thread(pid, tid, ts_ns);
  Push(t, op_id, kRangeFrame, ts_ns);
  t.ranges.emplace_back(t.open.back(), record);
}

void OpStackModel::EndRange(uint32_t pid, uint32_t tid, uint64_t record, uint64_t ts_ns) {
  ++stats_.events;
  auto it = threads_.find(ThreadKey(pid, tid));
  if (it == threads_.end()) return;  // its thread ended it already (exit): closed then
  ThreadState& t = it->second;
  auto range = std::find_if(t.ranges.begin(), t.ranges.end(),
                            [record](const auto& r) { return r.second == record; });
  if (range == t.ranges.end()) return;  // closed already, by a repair
  uint32_t index = range->first;
  // Whatever is still open inside it did not end before it: closed, marked.
  size_t inside = 0;
  for (; !t.open.empty() && t.open.back() != index; ++inside) CloseTop(t, ts_ns, kSliceEndUnseen);
  if (inside) ++stats_.mismatched_exits;
  if (!t.open.empty()) CloseTop(t, ts_ns, 0);
  if (t.open.empty()) MaybeEmit(t, ts_ns);
}

void OpStackModel::CloseTop(ThreadState& t, uint64_t ts_ns, uint8_t flags) {
  Slice& slice = t.forest[t.open.back()];
  if (slice.frame == kRangeFrame) {
    uint32_t index = t.open.back();
    std::erase_if(t.ranges, [index](const auto& r) { return r.first == index; });
  }
  slice.end_ns = std::max(ts_ns, slice.begin_ns);
  slice.flags |= flags;
  if (flags & kSliceEndUnseen) ++stats_.end_repaired;
  t.last_closed_end = slice.end_ns;
  t.open.pop_back();
  t.restored = std::min(t.restored, t.open.size());
}

void OpStackModel::Exit(ThreadState& t, uint32_t op_id, uint64_t frame, uint64_t ts_ns) {
  CloseReturned(t, frame, ts_ns);
  if (!t.open.empty() && t.forest[t.open.back()].frame == frame &&
      t.forest[t.open.back()].op_id == op_id) {
    CloseTop(t, ts_ns, 0);
  } else {
    ExitWithoutEntry(t, op_id, frame, ts_ns);
  }
  if (t.open.empty()) MaybeEmit(t, ts_ns);
}

void OpStackModel::ExitWithoutEntry(ThreadState& t, uint32_t op_id, uint64_t frame,
                                    uint64_t ts_ns) {
  // Its entry was not seen: it ran since before the probes went live, or the
  // entry was dropped. It encloses the finished ops after its last sibling
  // that ran on deeper frames; they are held back (the thread's preamble) or
  // are children of the open op it returns into.
  ++stats_.begin_repaired;
  bool has_parent = !t.open.empty();
  uint16_t depth = static_cast<uint16_t>(t.open.size());
  size_t region = has_parent ? t.open.back() + 1 : 0;
  if (!has_parent && !t.in_preamble) region = t.forest.size();  // already handed over
  size_t first_enclosed = t.forest.size();
  uint64_t sibling_end = has_parent ? t.forest[t.open.back()].begin_ns : t.last_emitted_end;
  // Ops already handed over are earlier siblings at the top level.
  bool has_sibling = !has_parent && !t.in_preamble && t.last_emitted_end > 0;
  for (size_t i = region; i < t.forest.size(); ++i) {
    const Slice& held = t.forest[i];
    if (held.depth != depth) continue;
    if (held.frame < frame) {
      if (first_enclosed == t.forest.size()) first_enclosed = i;
    } else {  // an earlier sibling (or an outer op on a different stack)
      first_enclosed = t.forest.size();
      sibling_end = std::max(sibling_end, held.end_ns);
      has_sibling = true;
    }
  }
  Slice slice;
  slice.end_ns = ts_ns;
  slice.op_id = op_id;
  slice.frame = frame;
  slice.depth = depth;
  slice.flags = kSliceBeginUnseen;
  // It began after its last sibling ended (or its parent began); with
  // nothing before it, when the trace started or with its first enclosed op.
  uint64_t begin = sibling_end;
  if (!has_parent && !has_sibling) {
    begin = first_enclosed < t.forest.size() ? t.forest[first_enclosed].begin_ns : ts_ns;
    begin = std::min(begin, start_ns_);
  }
  slice.begin_ns = std::min(begin, ts_ns);
  for (size_t i = first_enclosed; i < t.forest.size(); ++i) ++t.forest[i].depth;
  t.forest.insert(t.forest.begin() + static_cast<long>(first_enclosed), slice);
  t.last_closed_end = ts_ns;
}

void OpStackModel::MaybeEmit(ThreadState& t, uint64_t now_ns) {
  if (t.in_preamble) {
    if (now_ns - t.first_ts < options_.preamble_ns &&
        t.forest.size() < options_.preamble_max_slices)
      return;
    t.in_preamble = false;
  }
  Emit(t);
}

void OpStackModel::Emit(ThreadState& t) {
  if (t.forest.empty()) return;
  Describe(t);
  // The forest holds finished top-level trees in pre-order: hand them over
  // one tree at a time.
  size_t begin = 0;
  for (size_t i = 1; i <= t.forest.size(); ++i) {
    if (i == t.forest.size() || t.forest[i].depth == 0) {
      scratch_.assign(t.forest.begin() + begin, t.forest.begin() + i);
      sink_->AddSliceTree(t.pid, t.tid, scratch_);
      stats_.op_slices += scratch_.size();
      const Slice& top = scratch_.front();
      stats_.op_time_ns += top.end_ns > top.begin_ns ? top.end_ns - top.begin_ns : 0;
      t.last_emitted_end = std::max(t.last_emitted_end, scratch_.front().end_ns);
      begin = i;
    }
  }
  t.forest.clear();
}

void OpStackModel::Describe(ThreadState& t) {
  if (described_pids_.insert(t.pid).second) {
    auto known = processes_.find(t.pid);
    sink_->AddProcess(known != processes_.end() ? known->second : names_->Process(t.pid));
  }
  if (!described_threads_.insert(ThreadKey(t.pid, t.tid)).second) return;
  ThreadInfo info;
  info.pid = t.pid;
  info.tid = t.tid;
  info.name = t.name;
  if (info.name.empty()) {
    auto exited = exited_names_.find(ThreadKey(t.pid, t.tid));
    if (exited != exited_names_.end()) info.name = exited->second;
  }
  if (info.name.empty()) info.name = "thread " + std::to_string(t.tid);
  sink_->AddThread(info);
}

void OpStackModel::DescribeThread(uint32_t pid, uint32_t tid) {
  if (described_threads_.count(ThreadKey(pid, tid))) return;
  auto it = threads_.find(ThreadKey(pid, tid));
  if (it != threads_.end()) return Describe(it->second);
  // Not one of the model's threads yet: described without becoming one
  // (its first op event starts its state as usual).
  ThreadState t;
  t.pid = pid;
  t.tid = tid;
  t.name = names_->Thread(pid, tid);
  if (!processes_.count(pid)) processes_.emplace(pid, names_->Process(pid));
  Describe(t);
}

std::shared_ptr<const PythonStack> OpStackModel::PythonStackOf(uint32_t pid, uint32_t tid) const {
  auto it = threads_.find(ThreadKey(pid, tid));
  return it == threads_.end() ? nullptr : it->second.python;
}

uint32_t OpStackModel::InnermostOp(uint32_t pid, uint32_t tid) const {
  auto it = threads_.find(ThreadKey(pid, tid));
  if (it == threads_.end()) return UINT32_MAX;
  const ThreadState& t = it->second;
  // The innermost op, not a record_function range: what the profiler names
  // as an allocation's op.
  for (size_t i = t.open.size(); i-- > 0;) {
    uint32_t index = t.open[i];
    bool range = false;
    for (const auto& [open_range, record] : t.ranges) range |= open_range == index;
    if (!range) return t.forest[index].op_id;
  }
  return UINT32_MAX;
}

std::vector<OpStackModel::OpenThread> OpStackModel::OpenThreads() const {
  std::vector<OpenThread> threads;
  for (const auto& [key, t] : threads_) {
    OpenThread thread{t.pid, t.tid, {}, t.last_closed_end, t.first_ts};
    for (uint32_t index : t.open) thread.open.push_back(t.forest[index]);
    threads.push_back(std::move(thread));
  }
  std::sort(threads.begin(), threads.end(),
            [](const OpenThread& a, const OpenThread& b) { return a.pid != b.pid ? a.pid < b.pid : a.tid < b.tid; });
  return threads;
}

std::vector<ProcessInfo> OpStackModel::processes() const {
  std::vector<ProcessInfo> result;
  for (const auto& [pid, info] : processes_) result.push_back(info);
  std::sort(result.begin(), result.end(),
            [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; });
  return result;
}

void OpStackModel::OnThreadExit(uint32_t pid, uint32_t tid, uint64_t ts_ns, const char* comm) {
  auto it = threads_.find(ThreadKey(pid, tid));
  std::string name(comm, strnlen(comm, 16));
  if (it == threads_.end()) {
    exited_names_[ThreadKey(pid, tid)] = name;
    return;
  }
  ThreadState& t = it->second;
  if (t.name.empty()) t.name = name;
  while (!t.open.empty()) CloseTop(t, ts_ns, kSliceEndUnseen);
  Emit(t);
  threads_.erase(it);
}

void OpStackModel::FinishThreads(uint64_t end_ns) {
  // Deterministic order: by pid, then tid.
  std::vector<uint64_t> keys;
  keys.reserve(threads_.size());
  for (auto& [key, t] : threads_) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  for (uint64_t key : keys) {
    ThreadState& t = threads_[key];
    while (!t.open.empty()) CloseTop(t, end_ns, kSliceEndUnseen);
    Emit(t);
  }
  threads_.clear();
}

}  // namespace torchprobe
