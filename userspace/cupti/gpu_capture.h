// The GPU side of a `record --cupti` run, as one component the CUDA probe
// set (session/cuda_probe_set.h) owns: the receiver of the collectors' records (record_receiver),
// the join with our CUDA call probes (model/gpu_join), and the environment
// that makes the CUDA driver load the collector into a launched command.
#ifndef TORCHPROBE_CUPTI_GPU_CAPTURE_H
#define TORCHPROBE_CUPTI_GPU_CAPTURE_H

#include <memory>

#include "bpf/events.h"
#include "userspace/cupti/record_receiver.h"
#include "userspace/model/cuda_model.h"
#include "userspace/model/gpu_join.h"
#include "userspace/model/op_table.h"
#include "userspace/status.h"

namespace torchprobe {

class GpuCapture {
 public:
  // Listens, and sets CUDA_INJECTION64_PATH and the socket's address in
  // torchprobe's environment, which a command launched after inherits.
  // An error when the collector library is not beside torchprobe.
  static StatusOr<std::unique_ptr<GpuCapture>> Start(bool quiet);

  // A CUDA/NCCL call entered (before the op model opens its slice):
  // `innermost_op` is the op open on its thread (kNoOp: none). A call that
  // makes GPU work gets its correlation as an argument in `cuda`.
  void OnCudaCall(const tp_cuda_call_event& event, const OpTable& ops, uint32_t innermost_op, CudaModel* cuda);
  void Poll() { receiver_.Poll(); }
  // Before the outputs finish: the records still on their way, joined and
  // handed to `sink`, counted in `stats`.
  void Finish(GpuSink* sink, TraceStats* stats);

 private:
  explicit GpuCapture(bool quiet) : quiet_(quiet), receiver_(&join_, quiet) {}
  bool quiet_;
  bool said_silence_ = false;
  GpuJoin join_;
  CuptiReceiver receiver_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_CUPTI_GPU_CAPTURE_H
