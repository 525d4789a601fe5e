// The GPU side of a record run; see the header.
#include "userspace/probe_sets/cuda/gpu_capture.h"

#include <unistd.h>

#include <cstdio>

#include "userspace/base/clock.h"
#include "userspace/base/proc_maps.h"
#include "userspace/model/memory_sink.h"
#include "userspace/probe_sets/cuda/collector_injection.h"

namespace torchprobe {

namespace {

// The collector flushes CUPTI's buffers every 100 ms: at the stop, records
// are awaited until none came for longer than that, 2 s at most.
constexpr uint64_t kDrainQuietNs = 250'000'000;
constexpr uint64_t kDrainMaxNs = 2'000'000'000;
// A process that launches no kernel for this long is not waited for: a
// training step launches many within a second.
constexpr uint64_t kLaunchWaitNs = 3'000'000'000;
constexpr const char* kTorchLibrary = "libtorch_cpu.so";

}  // namespace

StatusOr<std::unique_ptr<GpuCapture>> GpuCapture::Listening(const char* option, bool quiet) {
  std::string collector = CollectorPath();
  if (access(collector.c_str(), R_OK) != 0)
    return Status::Error(std::string(option) + ": no CUPTI collector at " + collector +
                         " (make builds it beside torchprobe)");
  std::unique_ptr<GpuCapture> capture(new GpuCapture(quiet));
  Status status = capture->receiver_.Listen();
  if (!status.ok()) return status;
  return capture;
}

StatusOr<std::unique_ptr<GpuCapture>> GpuCapture::Start(bool quiet) {
  StatusOr<std::unique_ptr<GpuCapture>> capture = Listening("--cupti", quiet);
  if (capture.ok()) (*capture)->receiver_.ExportEnvironment(CollectorPath());
  return capture;
}

StatusOr<std::unique_ptr<GpuCapture>> GpuCapture::Inject(const std::vector<uint32_t>& pids, bool quiet,
                                                         bool wait) {
  StatusOr<std::unique_ptr<GpuCapture>> capture = Listening("--inject-cupti", quiet);
  if (!capture.ok()) return capture;
  for (uint32_t pid : pids) {
    // Gone, or not a PyTorch process: the session says so.
    if (!IsProcessAlive(pid)) continue;
    if (FindMappedImage(pid, kTorchLibrary).ok())
      (*capture)->InjectInto(pid, CollectorPath());
    else if (wait)  // no CUDA before torch either: nothing to inject at yet
      (*capture)->NotInjected(pid, std::string("it has not loaded ") + kTorchLibrary + " yet");
  }
  return capture;
}

void GpuCapture::InjectInto(uint32_t pid, const std::string& collector) {
  // Heard from before the session names it: its collector says hello
  // during the injection.
  receiver_.Accept(pid, 0);
  StatusOr<uint64_t> borrowed_ns = InjectCollector(pid, collector, receiver_.address(), kLaunchWaitNs);
  if (borrowed_ns.ok()) {
    injected_[pid] = 0;
    // The window stated: the borrowed thread ran our calls that long.
    if (!quiet_)
      std::fprintf(stderr, "torchprobe: --inject-cupti: collector loaded into pid %u (a thread borrowed for %.1f ms)\n",
                   pid, static_cast<double>(*borrowed_ns) / 1e6);
    return;
  }
  NotInjected(pid, borrowed_ns.status().message());
}

void GpuCapture::NotInjected(uint32_t pid, const std::string& why) {
  ++not_injected_;
  // A production job is traced on: its CPU side does not need the GPU's.
  std::fprintf(stderr, "torchprobe: --inject-cupti: pid %u: %s: GPU side not injected, CPU only\n", pid,
               why.c_str());
}

void GpuCapture::OnCudaCall(const tp_cuda_call_event& event, const OpTable& ops, uint32_t innermost_op,
                            SliceArgs* args) {
  if (event.op.op_id >= ops.size()) return;
  const tp_event_header& hdr = event.op.hdr;
  auto injected = injected_.find(hdr.pid);
  if (injected != injected_.end() && injected->second == 0) injected->second = hdr.ts_ns;
  std::string op = innermost_op < ops.size() ? ops[innermost_op].name : "";
  uint64_t correlation = join_.OnCpuCall(hdr.pid, hdr.tid, hdr.ts_ns, ops[event.op.op_id].name, std::move(op));
  if (correlation) args->push_back(SliceArg{kCorrelationArg, false, "", correlation});
}

void GpuCapture::Finish(GpuSink* sink, TraceStats* stats, uint64_t end_ns) {
  // The trace (window) ended then (attached by pid, the target runs on and
  // CUPTI records its calls after the probes stopped seeing them): what the
  // target does from here on is awaited only for the calls made before.
  uint64_t stop = end_ns ? end_ns : NowNs();
  receiver_.Drain(kDrainQuietNs, kDrainMaxNs);
  // Injected before our probes were live: what it recorded until they saw
  // the process' first call could join no launch, and is left out.
  for (const auto& [pid, first_call] : injected_)
    if (first_call) stats->gpu_before_start += join_.ForgetBefore(pid, first_call);
  stats->gpu_injected = injected_.size();
  stats->gpu_not_injected = not_injected_;
  join_.Emit(sink, stats, stop);
  receiver_.PutStats(stats);
  if (!receiver_.heard_from() && injected_.empty() && not_injected_ == 0 && !quiet_ && !said_silence_) {
    said_silence_ = true;
    std::fprintf(stderr,
                 "torchprobe: --cupti: no collector reported in (the command initialized no CUDA, or "
                 "cannot see %s from its root)\n",
                 CollectorPath().c_str());
  }
}

std::string GpuCapture::Summary(const TraceStats& stats) const {
  std::string line;
  if (!injected_.empty() || not_injected_ != 0)
    line = "--inject-cupti: collector loaded into " + std::to_string(injected_.size()) + " of " +
           std::to_string(injected_.size() + not_injected_) + " processes" +
           (not_injected_ ? " (the others: CPU side only)" : "");
  if (stats.gpu_refused_datagrams || stats.gpu_queue_full) {
    if (!line.empty()) line += "; ";
    line += "CUPTI socket: " + std::to_string(stats.gpu_refused_datagrams) +
            " datagrams from processes it does not trace refused, " + std::to_string(stats.gpu_queue_full) +
            " records past torchprobe's bounds left out";
  }
  return line;
}

}  // namespace torchprobe
