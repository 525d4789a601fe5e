// The Python stacks probe set; see the header.
#include "userspace/probe_sets/python/python_probe_set.h"

#include <cstdio>
#include <cstring>

#include "userspace/base/counted.h"
#include "userspace/base/remote_memory.h"

namespace torchprobe {
namespace {

constexpr size_t kMaxStacksKept = 1 << 16;  // distinct stacks kept per process
constexpr size_t kMaxFramesNow = 8;         // frames of a stall report's Python stack

}  // namespace

Status PythonProbeSet::Attach(const TracedProcess& process) {
  uint32_t pid = process.pid;
  if (!attached_.insert(pid).second) return Status::Ok();  // a later library load: nothing new
  StatusOr<PythonRuntime> runtime = FindPythonRuntime(pid);
  if (!runtime.ok()) {
    unsupported_[pid] = runtime.status().message();
    if (!quiet_)
      std::fprintf(stderr, "torchprobe: no Python stacks for pid %u: %s\n", pid, runtime.status().message().c_str());
    return Status::Ok();
  }
  Status set = context_.bpf->UpdateMap("py_layouts", pid, runtime->layout);
  if (!set.ok()) {
    unsupported_[pid] = set.message();
    return Status::Ok();
  }
  Process& entry = processes_[pid];
  entry.code = std::make_unique<CodeObjects>(pid, *runtime);
  entry.layout = runtime->layout;
  return Status::Ok();
}

void PythonProbeSet::Release(uint32_t pid) {
  if (!attached_.erase(pid)) return;
  context_.bpf->DeleteFromMap("py_layouts", pid);
  processes_.erase(pid);
}

void PythonProbeSet::ThreadExited(uint32_t pid, uint32_t tid) {
  // Its thread state is gone: a thread reusing the id finds its own.
  uint64_t key = static_cast<uint64_t>(pid) << 32 | tid;
  context_.bpf->DeleteFromMap("py_threads", key);
}

void PythonProbeSet::Route(EventRouter& router) {
  router.OnRaw(EV_PY_STACK, offsetof(tp_py_stack_event, frames),
               [this](const void* record, size_t size) { OnStack(record, size); });
}

void PythonProbeSet::OnStack(const void* record, size_t size) {
  tp_py_stack_event event;
  size_t copied = std::min(size, sizeof event);
  std::memcpy(&event, record, copied);
  size_t depth = std::min<size_t>({event.depth, TP_PY_MAX_FRAMES,
                                   (copied - offsetof(tp_py_stack_event, frames)) / sizeof(tp_py_frame)});
  uint32_t pid = event.hdr.pid, tid = event.hdr.tid;
  if (!model_) return;
  auto process = processes_.find(pid);
  if (depth == 0 || process == processes_.end()) {
    ++empty_;
    model_->SetPythonStack(pid, tid, event.hdr.ts_ns, nullptr);
    return;
  }
  ++stacks_;
  ++run_stacks_;
  // BPF sends innermost first; the model keeps the outermost first.
  std::vector<std::pair<uint64_t, int32_t>> key;
  key.reserve(depth + 1);
  for (size_t i = depth; i-- > 0;) key.emplace_back(event.frames[i].code, event.frames[i].lasti);
  bool truncated = event.flags & PY_STACK_TRUNCATED;
  if (truncated) {
    ++truncated_;
    key.emplace_back(0, -1);  // a truncated stack is not the full one with the same frames
  }
  // Bounded: a long run's stacks are made again rather than kept forever
  // (the slices hold theirs).
  if (process->second.stacks.size() >= kMaxStacksKept) process->second.stacks.clear();
  auto [it, made] = process->second.stacks.try_emplace(std::move(key));
  if (made) {
    auto stack = std::make_shared<PythonStack>();
    stack->truncated = truncated;
    for (size_t i = depth; i-- > 0;) {
      PythonFrame frame;
      if (process->second.code->Frame(event.frames[i].code, event.frames[i].lasti, &frame)) {
        stack->frames.push_back(std::move(frame));
        ++frames_;
      } else {
        ++unresolved_;
        ++run_unresolved_;
      }
    }
    it->second = std::move(stack);
  }
  model_->SetPythonStack(pid, tid, event.hdr.ts_ns, it->second->frames.empty() ? nullptr : it->second);
}

void PythonProbeSet::ThreadNow(uint32_t pid, uint32_t tid, uint64_t now_ns,
                               std::vector<std::pair<std::string, std::string>>& notes) {
  auto process = processes_.find(pid);
  tp_py_thread thread{};
  if (process == processes_.end() ||
      !context_.bpf->LookupInMap("py_threads", static_cast<uint64_t>(pid) << 32 | tid, &thread) || !thread.tstate)
    return;  // a thread that never entered an op from Python: its thread state was never looked for
  const tp_py_layout& l = process->second.layout;
  auto read = [pid](uint64_t address, uint64_t* value) {
    return address && ReadRemote(static_cast<pid_t>(pid), address, value, sizeof *value);
  };
  uint64_t frame = 0, holder = thread.tstate;
  if (l.tstate_cframe != TP_PY_NO_CFRAME && !read(thread.tstate + l.tstate_cframe, &holder)) return;
  if (!read(holder + l.current_frame, &frame)) return;
  std::string text;
  size_t depth = 0;
  // The walk BPF does (bpf/python_stack.bpf.h), innermost first, a few frames.
  for (size_t turn = 0; frame && turn < kMaxFramesNow * 4 && depth < kMaxFramesNow; ++turn) {
    uint8_t bytes[TP_PY_FRAME_READ];
    if (!ReadRemote(static_cast<pid_t>(pid), frame, bytes, sizeof bytes)) break;
    uint64_t code = 0, at = 0, previous = 0;
    std::memcpy(&code, bytes + l.frame_code, 8);
    std::memcpy(&at, bytes + l.frame_instr, 8);
    std::memcpy(&previous, bytes + l.frame_previous, 8);
    uint8_t owner = bytes[l.frame_owner];
    frame = previous;
    if (owner == l.owner_cstack || !code) continue;
    PythonFrame resolved;
    int32_t lasti = static_cast<int32_t>((static_cast<int64_t>(at - code - l.code_adaptive)) / 2);
    if (!process->second.code->Frame(code, lasti, &resolved)) continue;
    text += (depth++ ? " <- " : "") + resolved.code->file + "(" + std::to_string(resolved.line) + "): " +
            resolved.code->function;
  }
  if (frame && depth == kMaxFramesNow) text += " <- ...";
  if (!text.empty()) notes.emplace_back("python", text);
}

TraceSink* PythonProbeSet::DecorateSlices(TraceSink* next) {
  frame_slices_ = std::make_unique<PythonFrames>(next, ops_);
  return frame_slices_.get();
}

void PythonProbeSet::FillStats(TraceStats& stats) {
  stats.Count("python.stacks") = stacks_;
  stats.Count("python.empty_stacks") = empty_;
  stats.Count("python.truncated") = truncated_;
  stats.Count("python.frames") = frames_;
  stats.Count("python.unresolved_frames") = unresolved_;
  stats.Count("python.frame_slices") = frame_slices_ ? frame_slices_->frames_made() : 0;
  stats.Count("python.processes_without", StatsScope::kRun) = unsupported_.size();
}

void PythonProbeSet::Wire(const ModelWiring& wiring) {
  model_ = wiring.model;
  stacks_ = empty_ = truncated_ = frames_ = unresolved_ = 0;  // each window counts its own
}

std::string PythonProbeSet::Summary(const TraceStats& stats) const {
  std::string line = "Python stacks: " + Counted(run_stacks_, "stack", "stacks") + " read";
  if (run_unresolved_) line += ", " + Counted(run_unresolved_, "frame", "frames") + " whose code could not be read";
  if (!unsupported_.empty())
    line += "; none for " + Counted(unsupported_.size(), "process", "processes") + " (" +
            unsupported_.begin()->second + ")";
  return line;
}

}  // namespace torchprobe
