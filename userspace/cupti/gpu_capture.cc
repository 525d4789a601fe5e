// The GPU side of a record run; see the header.
#include "userspace/cupti/gpu_capture.h"

#include <unistd.h>

#include <cstdio>

#include "userspace/clock.h"
#include "userspace/model/memory_sink.h"

namespace torchprobe {

namespace {

// The collector flushes CUPTI's buffers every 100 ms: at the stop, records
// are awaited until none came for longer than that, 2 s at most.
constexpr uint64_t kDrainQuietNs = 250'000'000;
constexpr uint64_t kDrainMaxNs = 2'000'000'000;

}  // namespace

StatusOr<std::unique_ptr<GpuCapture>> GpuCapture::Start(bool quiet) {
  std::string collector = CollectorPath();
  if (access(collector.c_str(), R_OK) != 0)
    return Status::Error("--cupti: no CUPTI collector at " + collector + " (make builds it beside torchprobe)");
  std::unique_ptr<GpuCapture> capture(new GpuCapture(quiet));
  Status status = capture->receiver_.Listen();
  if (!status.ok()) return status;
  capture->receiver_.ExportEnvironment(collector);
  return capture;
}

void GpuCapture::OnCudaCall(const tp_cuda_call_event& event, const OpTable& ops, uint32_t innermost_op,
                            CudaModel* cuda) {
  if (event.op.op_id >= ops.size()) return;
  const tp_event_header& hdr = event.op.hdr;
  std::string op = innermost_op < ops.size() ? ops[innermost_op].name : "";
  uint64_t correlation = join_.OnCpuCall(hdr.pid, hdr.tid, hdr.ts_ns, ops[event.op.op_id].name, std::move(op));
  if (correlation) cuda->AddArg(hdr.pid, hdr.tid, hdr.ts_ns, SliceArg{kCorrelationArg, false, "", correlation});
}

void GpuCapture::Finish(GpuSink* sink, TraceStats* stats) {
  // The trace (window) ends now: what the target does from here on is
  // awaited only for the calls made before.
  uint64_t stop = NowNs();
  receiver_.Drain(kDrainQuietNs, kDrainMaxNs);
  join_.Emit(sink, stats, stop);
  receiver_.PutStats(stats);
  if (!receiver_.heard_from() && !quiet_ && !said_silence_) {
    said_silence_ = true;
    std::fprintf(stderr,
                 "torchprobe: --cupti: no collector reported in (the command initialized no CUDA, or "
                 "cannot see %s from its root)\n",
                 CollectorPath().c_str());
  }
}

}  // namespace torchprobe
