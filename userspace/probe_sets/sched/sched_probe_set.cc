// The thread states probe set; see the header.
#include "userspace/probe_sets/sched/sched_probe_set.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "userspace/base/syscall_names.h"
#include "userspace/discover/python_runtime.h"
#include "userspace/model/thread_state.h"

namespace torchprobe {

// Counts in TraceStats::sections.
inline constexpr const char* kOffCpuCount = "sched.offcpu";
inline constexpr const char* kGilWaitCount = "sched.gil_waits";
inline constexpr const char* kUnwrittenCount = "sched.offcpu_unwritten";
inline constexpr const char* kWithoutGilCount = "sched.processes_without_gil";

Status SchedProbeSet::Attach(const TracedProcess& process) {
  if (links_.empty()) {
    for (const char* name : {"sched_wakeup", "sched_switch"}) {
      bpf_program* program = context_.bpf->Program(name);
      if (!program) continue;  // empty programs (the bench's floor): nothing to attach
      bpf_link* link = bpf_program__attach(program);
      if (!link) return Status::Error(std::string("cannot attach the scheduler's ") + name +
                                      " tracepoint: " + std::strerror(errno));
      links_.emplace_back(link);
    }
  }
  uint32_t pid = process.pid;
  if (!attached_.insert(pid).second) return Status::Ok();  // a later library load
  StatusOr<PythonRuntime> runtime = FindPythonRuntime(pid);
  std::string missing = !runtime.ok() ? runtime.status().message() : runtime->gil_missing;
  if (missing.empty()) {
    tp_gil_range range{runtime->gil_begin, runtime->gil_end};
    Status set = context_.bpf->UpdateMap("sched_gil", pid, range);
    if (set.ok()) return Status::Ok();
    missing = set.message();
  }
  ++without_gil_;
  if (!quiet_) std::fprintf(stderr, "torchprobe: --sched: no GIL waits for pid %u (shown as futex sleeps): %s\n",
                            pid, missing.c_str());
  return Status::Ok();
}

void SchedProbeSet::Release(uint32_t pid) {
  if (attached_.erase(pid)) context_.bpf->DeleteFromMap("sched_gil", pid);
}

void SchedProbeSet::Route(EventRouter& router) {
  router.OnRaw(EV_OFFCPU, sizeof(tp_offcpu_event), [this](const void* record, size_t size) { OnOffCpu(record, size); });
}

void SchedProbeSet::Wire(const ModelWiring& wiring) {
  model_ = wiring.model;
  sink_ = wiring.files;
}

void SchedProbeSet::OnOffCpu(const void* record, size_t size) {
  tp_offcpu_event event;
  std::memcpy(&event, record, sizeof event);
  ++offcpu_;
  ++run_offcpu_;
  if (event.kind == OFFCPU_GIL) ++gil_, ++run_gil_;
  if (!sink_ || !model_) {
    ++unwritten_;
    return;
  }
  OffCpu off;
  off.pid = event.hdr.pid;
  off.tid = event.hdr.tid;
  off.off_ns = event.off_ns;
  off.wake_ns = event.wake_ns;
  off.on_ns = event.hdr.ts_ns;
  off.kind = event.kind == OFFCPU_GIL ? OffCpu::kGil : event.kind == OFFCPU_BLOCKED ? OffCpu::kBlocked
                                                                                    : OffCpu::kPreempted;
  off.state = TaskStateLetter(event.state);
  off.wait = SyscallName(event.syscall);
  model_->DescribeThread(off.pid, off.tid);  // its track's parent comes first
  sink_->AddOffCpu(off);
}

void SchedProbeSet::ThreadNow(uint32_t pid, uint32_t tid, uint64_t now_ns,
                              std::vector<std::pair<std::string, std::string>>& notes) {
  tp_sched_off off{};
  if (!attached_.count(pid) || !context_.bpf->LookupInMap("sched_off", tid, &off) || off.off_ns > now_ns) return;
  char line[160];
  auto since = [now_ns](uint64_t ns) { return (now_ns - ns) / 1e9; };
  std::string wait = SyscallName(off.syscall);
  if (off.kind == OFFCPU_PREEMPTED) {
    std::snprintf(line, sizeof line, "runnable, preempted %.3f s ago", since(off.off_ns));
  } else if (off.wake_ns) {
    std::snprintf(line, sizeof line, "runnable for %.3f s, woken after %.3f s %s", since(off.wake_ns),
                  (off.wake_ns - off.off_ns) / 1e9, off.kind == OFFCPU_GIL ? "waiting for the GIL" : "asleep");
  } else if (off.kind == OFFCPU_GIL) {
    std::snprintf(line, sizeof line, "waiting for the GIL for %.3f s", since(off.off_ns));
  } else {
    std::snprintf(line, sizeof line, "asleep (%c)%s%s for %.3f s", TaskStateLetter(off.state),
                  wait.empty() ? "" : " in ", wait.c_str(), since(off.off_ns));
  }
  notes.emplace_back("state", line);
}

void SchedProbeSet::FillStats(TraceStats& stats) {
  stats.Count(kOffCpuCount) += offcpu_;
  stats.Count(kGilWaitCount) += gil_;
  stats.Count(kUnwrittenCount) += unwritten_;
  stats.Count(kWithoutGilCount, StatsScope::kRun) = without_gil_;
  offcpu_ = gil_ = unwritten_ = 0;
}

std::string SchedProbeSet::Summary(const TraceStats& stats) const {
  std::string line = "--sched: " + std::to_string(run_offcpu_) + " times off a CPU (" + std::to_string(run_gil_) +
                     " waiting for the GIL)";
  if (without_gil_) line += "; " + std::to_string(without_gil_) + " processes without GIL waits (said above)";
  return line;
}

}  // namespace torchprobe
