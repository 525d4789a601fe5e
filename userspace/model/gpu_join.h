// The GPU component of the model: joins what CUPTI saw (userspace/cupti)
// with what the uprobes saw. CUPTI's correlation id links each kernel, copy
// or fill to the runtime/driver API call that made it; that call is linked
// to our own EV_CUDA_CALL entry of it on the same thread (the latest entry
// at or before CUPTI's start of the call and after the thread's previous
// call: the uprobe fires on the function's first instruction, CUPTI inside
// it; both stamp CLOCK_MONOTONIC; or, for a runtime call made through a
// runtime we do not probe, like the copy cuBLAS links in, our entry of the
// driver call inside it). The
// entry's slice and its GPU activities then carry one correlation number
// (kCorrelationArg), which the writers turn into flows; each activity also
// gets the op that made the call. A CUDA graph's kernels carry the graph
// launch's correlation id, so they join to the cudaGraphLaunch.
//
// Activities are held until Emit (the end of the trace): API records reach
// torchprobe in CUPTI's buffers, often after the launch's slice was written.
// What it holds is bounded (gpu_join.cc says why the bound); past it,
// activities, API calls and launches are left out and counted
// (gpu_queue_full).
#ifndef TORCHPROBE_MODEL_GPU_JOIN_H
#define TORCHPROBE_MODEL_GPU_JOIN_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "userspace/model/gpu_sink.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

class GpuJoin : public GpuRecordSink {
 public:
  // `max_held`: activities, API calls and launches each held at most.
  explicit GpuJoin(size_t max_held = kMaxHeld) : max_held_(max_held) {}
  static const size_t kMaxHeld;

  // Whether a CUDA/NCCL call named `call` makes GPU work (launches, copies,
  // fills, graph launches, NCCL collectives), so its slice gets a correlation.
  static bool MakesGpuWork(std::string_view call);

  // A CPU call our probes saw enter; `op` is the innermost slice open on
  // its thread ("" outside ops). Returns the correlation its slice carries,
  // 0 for calls that make no GPU work or that run inside one that does.
  uint64_t OnCpuCall(uint32_t pid, uint32_t tid, uint64_t begin_ns, std::string_view call, std::string op);
  void OnApiCall(const GpuApiCall& api) override;
  void OnActivity(GpuActivity activity) override;

  // Joins and hands every activity of a call made by `until_ns` to `sink`,
  // in start order per stream, overlaps on a stream clamped; counts into
  // `stats` (gpu_activities, gpu_unjoined, gpu_clamped, gpu_api_calls,
  // gpu_queue_full, and gpu_after_stop: those of later calls, kept for the
  // next Emit). Forgets
  // what it handed over, and the API calls and launches up to `until_ns`.
  void Emit(GpuSink* sink, TraceStats* stats, uint64_t until_ns = UINT64_MAX);
  size_t pending() const { return activities_.size(); }
  // Forgets `pid`'s activities of calls made before `since_ns` (a process
  // the collector was injected into before our probes saw its calls:
  // those could join nothing) and returns how many.
  size_t ForgetBefore(uint32_t pid, uint64_t since_ns);

 private:
  struct Launch {
    uint64_t correlation = 0;
    std::string call;
    std::string op;
    uint32_t cupti_correlation = 0;  // the API call joined to it; 0: none yet
  };
  // Each API call that made an activity, joined to our entry of it.
  std::map<std::pair<uint32_t, uint32_t>, Launch*> JoinApiCalls();
  // Our entry of CUPTI's `api` call among a thread's `entries` (by begin),
  // none before `previous_end` (the thread's previous call), or nullptr.
  static Launch* MatchLaunch(std::map<uint64_t, Launch>& entries, const GpuApiCall& api, uint64_t previous_end);

  const size_t max_held_;
  uint64_t next_correlation_ = 1;
  uint64_t api_calls_ = 0;
  uint64_t over_bound_ = 0;  // left out past max_held_ since the last Emit
  size_t launch_count_ = 0;  // in launches_
  std::map<std::pair<uint32_t, uint32_t>, std::map<uint64_t, Launch>> launches_;  // (pid, tid) -> by begin
  std::map<std::pair<uint32_t, uint32_t>, GpuApiCall> apis_;  // (pid, CUPTI correlation) -> outermost call
  std::vector<GpuActivity> activities_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_GPU_JOIN_H
