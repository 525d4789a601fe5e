// The GPU side of a `record --cupti` run, as one component the CUDA probe
// set (probe_sets/cuda/cuda_probe_set.h) owns: the receiver of the collectors' records (record_receiver),
// the join with our CUDA call probes (model/gpu_join), and how the collector
// gets into the targets: the environment that makes the CUDA driver load it
// into a launched command, or (--inject-cupti) loading it into running
// processes (collector_injection.h), each of which that cannot be is traced
// on its CPU side only, said in one line and counted. Only the run's own
// processes are heard on the socket: those injected, and those the session
// names (launched, named, or forked by one; Follow).
#ifndef TORCHPROBE_PROBE_SETS_GPU_CAPTURE_H
#define TORCHPROBE_PROBE_SETS_GPU_CAPTURE_H

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bpf/events.h"
#include "userspace/base/op_table.h"
#include "userspace/base/status.h"
#include "userspace/cupti/record_receiver.h"
#include "userspace/model/cuda_model.h"
#include "userspace/model/gpu_join.h"

namespace torchprobe {

class GpuCapture {
 public:
  // Listens, and sets CUDA_INJECTION64_PATH and the socket's address in
  // torchprobe's environment, which a command launched after inherits.
  // An error when the collector library is not beside torchprobe.
  static StatusOr<std::unique_ptr<GpuCapture>> Start(bool quiet);
  // --inject-cupti: listens and loads the collector into each of `pids`
  // that maps libtorch, before our probes and their keeper (which ptraces
  // them too) attach. The others are the session's to refuse, or with
  // `wait` (--wait) traced on their CPU side only. An error only when the
  // collector library is not beside torchprobe.
  static StatusOr<std::unique_ptr<GpuCapture>> Inject(const std::vector<uint32_t>& pids, bool quiet, bool wait);

  // A CUDA/NCCL call entered (before the op model opens its slice):
  // `innermost_op` is the op open on its thread (kNoOp: none). A call that
  // makes GPU work gets its correlation as an argument in `cuda`.
  void OnCudaCall(const tp_cuda_call_event& event, const OpTable& ops, uint32_t innermost_op, SliceArgs* args);
  // The session's processes (probe_set.h): `pid` is one of the run's from
  // `since_ns` on; it exited.
  void Follow(uint32_t pid, uint64_t since_ns) { receiver_.Accept(pid, since_ns); }
  void Exited(uint32_t pid) { receiver_.Forget(pid); }
  // `known_ns`: every process that became one of the run's by then was followed.
  void Poll(uint64_t known_ns) { receiver_.Poll(known_ns); }
  // Before the outputs finish: the records still on their way, joined and
  // handed to `sink`, counted in `stats`. `end_ns`: when the trace (window)
  // stopped recording, 0 for now; the activities of calls made after it are
  // held for the next window.
  void Finish(GpuSink* sink, TraceStats* stats, uint64_t end_ns = 0);
  // A line for the run's summary about --inject-cupti and what the socket
  // refused or could not hold (from `stats`), or "".
  std::string Summary(const TraceStats& stats) const;

 private:
  explicit GpuCapture(bool quiet) : quiet_(quiet), receiver_(&join_, quiet) {}
  // The collector is there and the receiver listens; `option` names the
  // run's for the error.
  static StatusOr<std::unique_ptr<GpuCapture>> Listening(const char* option, bool quiet);
  void InjectInto(uint32_t pid, const std::string& collector);
  void NotInjected(uint32_t pid, const std::string& why);
  bool quiet_;
  bool said_silence_ = false;
  // --inject-cupti: the processes it was loaded into, by the time of the
  // first CUDA call our probes saw in each (0: none yet); those it was not.
  std::map<uint32_t, uint64_t> injected_;
  uint64_t not_injected_ = 0;
  GpuJoin join_;
  CuptiReceiver receiver_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_GPU_CAPTURE_H
