// The CUDA calls' arguments: the runtime/driver/NCCL functions (and c10d's
// collectives) are probed as op-like images by the ops set (their calls are
// slices inside the op that made them, see probe_sets/ops/op_images.h); this
// set reads what their entries carry (stream, grid, bytes, kernel, group;
// model/cuda_model) and sets it on the call's slice (Slice::args), and names
// launched kernels after the process' own symbols.
// With --cupti (or --inject-cupti) it also owns the GPU side (GpuCapture),
// which joins CUPTI's records to these calls and adds each launch's
// correlation to its args.
#ifndef TORCHPROBE_PROBE_SETS_CUDA_PROBE_SET_H
#define TORCHPROBE_PROBE_SETS_CUDA_PROBE_SET_H

#include <memory>
#include <utility>

#include "userspace/discover/address_symbols.h"
#include "userspace/model/cuda_model.h"
#include "userspace/probe_sets/cuda/gpu_capture.h"
#include "userspace/probe_sets/probe_set.h"

namespace torchprobe {

class CudaProbeSet : public ProbeSet {
 public:
  // `gpu` (record --cupti, else null): what ran on the GPU, joined to these
  // calls (userspace/probe_sets/cuda/gpu_capture.h).
  CudaProbeSet(const OpTable* ops, std::unique_ptr<GpuCapture> gpu)
      : ops_(ops),
        gpu_(std::move(gpu)),
        model_(ops, [this](uint32_t pid, uint64_t address) { return kernel_symbols_.Name(pid, address); }) {}

  // Remembers the process' mappings at each attach and library load, so
  // launches are named after it may be gone.
  Status Attach(const TracedProcess& process) override {
    kernel_symbols_.Remember(process.pid);
    return Status::Ok();
  }
  void Release(uint32_t) override {}  // names outlive the process
  void Wire(const ModelWiring& wiring) override { wiring_ = wiring; }
  // Before the op model opens the call's slice (the ops set routes the
  // entry late): the arguments are read and, with --cupti, the call is
  // joined to its GPU work while the innermost op is its caller.
  void Route(EventRouter& router) override {
    router.On<tp_cuda_call_event>({EV_CUDA_CALL}, [this](const tp_cuda_call_event& event) {
      args_ = model_.ArgsOf(event);
      if (gpu_ && wiring_.model)
        gpu_->OnCudaCall(event, *ops_, wiring_.model->InnermostOp(event.op.hdr.pid, event.op.hdr.tid), &args_);
    });
    router.On<tp_collective_event>({EV_COLLECTIVE},
                                   [this](const tp_collective_event& event) { args_ = model_.ArgsOf(event); });
  }
  // After the entry opened the slice (the ops set's RouteLate came first):
  // the slice carries them.
  void RouteLate(EventRouter& router) override {
    router.On<tp_cuda_call_event>({EV_CUDA_CALL},
                                  [this](const tp_cuda_call_event& event) { SetArgs(event.op.hdr); });
    router.On<tp_collective_event>({EV_COLLECTIVE},
                                   [this](const tp_collective_event& event) { SetArgs(event.op.hdr); });
  }
  // Who may send GPU records: the run's processes (cupti/datagram_inbox.h).
  void Follow(uint32_t pid, uint64_t since_ns) override {
    if (gpu_) gpu_->Follow(pid, since_ns);
  }
  void Exited(uint32_t pid) override {
    if (gpu_) gpu_->Exited(pid);
  }
  void Poll(uint64_t known_ns) override {
    if (gpu_) gpu_->Poll(known_ns);
  }
  // The GPU activities received by now go to the window's outputs (the
  // files, or --steps' windows, which hand them to the window open).
  void FillStats(TraceStats& stats) override {
    auto* sink = dynamic_cast<GpuSink*>(wiring_.outputs);
    if (gpu_ && sink) gpu_->Finish(sink, &stats, wiring_.model ? wiring_.model->stop_ns() : 0);
  }
  std::string Summary(const TraceStats& stats) const override { return gpu_ ? gpu_->Summary(stats) : ""; }

 private:
  void SetArgs(const tp_event_header& entry) {
    if (args_.empty() || !wiring_.model) return;
    wiring_.model->SetArgs(entry.pid, entry.tid, entry.ts_ns, std::make_shared<const SliceArgs>(std::move(args_)));
    args_.clear();
  }

  const OpTable* ops_;
  std::unique_ptr<GpuCapture> gpu_;
  ModelWiring wiring_;
  AddressSymbols kernel_symbols_;  // CUDA launches' host stubs -> kernel names
  CudaModel model_;
  SliceArgs args_;  // the entry being routed: read before its slice opens, set on it after
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_CUDA_PROBE_SET_H
