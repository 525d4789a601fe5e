// The --memory probe set: libc10's CPU allocator and the CUDA runtime's
// cudaMalloc/cudaFree on each traced process, the allocation table they
// feed (model/memory_model) and, with --memory-timeline and
// --memory-snapshot, the run's timeline and allocator snapshot files (of
// what the trace files keep: under --steps, the windows' steps). Discovery is discover/allocator_probes, the links
// attach/memory_links, the BPF side bpf/memory.bpf.c.
#ifndef TORCHPROBE_PROBE_SETS_MEMORY_PROBE_SET_H
#define TORCHPROBE_PROBE_SETS_MEMORY_PROBE_SET_H

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "userspace/discover/allocator_probes.h"
#include "userspace/export/memory_snapshot.h"
#include "userspace/export/memory_timeline.h"
#include "userspace/model/memory_categories.h"
#include "userspace/model/memory_model.h"
#include "userspace/probe_sets/probe_set.h"

namespace torchprobe {

class MemoryProbeSet : public ProbeSet {
 public:
  // `timeline_path`, `snapshot_path`: --memory-timeline's and
  // --memory-snapshot's files, "" for none. Opened (and a bad path said in
  // one line) before anything is attached.
  // `categories` (--shapes too): each allocation's category, inferred from
  // the ops' Tensor arguments (model/memory_categories).
  static StatusOr<std::unique_ptr<MemoryProbeSet>> Open(const std::string& timeline_path,
                                                        const std::string& snapshot_path, bool categories,
                                                        const OpTable* ops);

  // bpf/memory.bpf.c, each with its stand-in on the same kind of point (the floor).
  void Configure(BpfConfig& config) const override {
    for (const char* entry : {"alloc_enter", "free_enter", "device_report", "segment_enter", "segment_free"})
      config.Want(entry, "empty_enter");
    for (const char* exit : {"alloc_return", "segment_return"}) config.Want(exit, "empty_return");
  }
  Status Attach(const TracedProcess& process) override;
  // With categories: the window's MemoryCategories, between the slices and the outputs.
  TraceSink* DecorateSlices(TraceSink* next) override;
  void Release(uint32_t pid) override { processes_.erase(pid); }
  void Wire(const ModelWiring& wiring) override;
  void FillStats(TraceStats& stats) override;
  bool FinishRun(std::string* error) override {
    return (!timeline_ || timeline_->Finish(error)) && (!snapshot_ || snapshot_->Finish(error));
  }
  std::string Summary(const TraceStats& stats) const override;

  void Route(EventRouter& router) override {
    router.On<tp_mem_event>({EV_MEM_ALLOC, EV_MEM_FREE, EV_SEGMENT_ALLOC, EV_SEGMENT_FREE},
                            [this](const tp_mem_event& event) {
                              // Only an allocation carries its Python stack: no lookup for the rest.
                              model_->OnEvent(event, ops_model_->InnermostOp(event.hdr.pid, event.hdr.tid),
                                              event.hdr.type == EV_MEM_ALLOC
                                                  ? ops_model_->PythonStackOf(event.hdr.pid, event.hdr.tid)
                                                  : nullptr);
                            });
    router.On<tp_device_mem_event>({EV_DEVICE_MEM}, [this](const tp_device_mem_event& event) {
      model_->OnDeviceEvent(event, ops_model_->InnermostOp(event.hdr.pid, event.hdr.tid),
                            event.bytes > 0 ? ops_model_->PythonStackOf(event.hdr.pid, event.hdr.tid) : nullptr);
    });
  }

 private:
  struct Process {
    std::string allocator;     // identity of the libc10 probed
    std::string cuda_runtime;  // ... and of the libcudart
    std::vector<ProbeLinks> links;
  };
  // The CUDA runtime's cudaMalloc/cudaFree, once it is mapped (it is loaded
  // later than libc10: seen at a library load).
  Status AttachSegments(uint32_t pid, Process& p);

  std::unique_ptr<MemoryTimeline> timeline_;
  std::unique_ptr<MemorySnapshot> snapshot_;
  std::unique_ptr<MemoryModel> model_;  // per window
  bool categories_ = false;
  const OpTable* ops_ = nullptr;
  std::unique_ptr<MemoryCategories> window_categories_;  // per window, with categories
  MemorySinks sinks_;                                     // the window's memory sink and its categories
  OpStackModel* ops_model_ = nullptr;
  std::map<std::string, AllocatorProbes> allocators_;  // by image identity
  std::map<uint32_t, Process> processes_;              // by pid
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_MEMORY_PROBE_SET_H
