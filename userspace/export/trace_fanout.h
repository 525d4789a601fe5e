// One model, several writers: hands every TraceSink call to each output of a
// `record` (-o Perfetto, --et, --chrome) in the same order, so all outputs
// come from the same events and number their slices alike; memory events and GPU
// activities and thread states go to the outputs that take them.
#ifndef TORCHPROBE_EXPORT_TRACE_FANOUT_H
#define TORCHPROBE_EXPORT_TRACE_FANOUT_H

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "userspace/model/gpu_sink.h"
#include "userspace/model/memory_categories.h"
#include "userspace/model/memory_sink.h"
#include "userspace/model/slice_args.h"
#include "userspace/model/thread_state.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

class TraceFanout : public TraceSink, public MemorySink, public MemoryCategorySink, public GpuSink, public ThreadStateSink {
 public:
  void Add(std::unique_ptr<TraceSink> sink) {
    if (auto* memory = dynamic_cast<MemorySink*>(sink.get())) memory_.push_back(memory);
    if (auto* categories = dynamic_cast<MemoryCategorySink*>(sink.get())) categories_.push_back(categories);
    if (auto* gpu = dynamic_cast<GpuSink*>(sink.get())) gpu_.push_back(gpu);
    if (auto* states = dynamic_cast<ThreadStateSink*>(sink.get())) states_.push_back(states);
    sinks_.push_back(std::move(sink));
  }
  bool empty() const { return sinks_.empty(); }

  void Begin(const OpTable& ops, const ClockSnapshot& clock) override {
    for (auto& s : sinks_) s->Begin(ops, clock);
  }
  void AddOps(const OpTable& ops) override {
    for (auto& s : sinks_) s->AddOps(ops);
  }
  void AddProcess(const ProcessInfo& process) override {
    for (auto& s : sinks_) s->AddProcess(process);
  }
  void AddThread(const ThreadInfo& thread) override {
    for (auto& s : sinks_) s->AddThread(thread);
  }
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override {
    for (auto& s : sinks_) s->AddSliceTree(pid, tid, slices);
  }
  void AddMemoryEvent(const MemoryEvent& event) override {
    for (MemorySink* s : memory_) s->AddMemoryEvent(event);
  }
  void AddMemoryCategories(const MemoryCategoryResult& result) override {
    for (MemoryCategorySink* s : categories_) s->AddMemoryCategories(result);
  }
  void AddGpuActivity(const GpuActivity& activity) override {
    for (GpuSink* s : gpu_) s->AddGpuActivity(activity);
  }
  void AddOffCpu(const OffCpu& off) override {
    for (ThreadStateSink* s : states_) s->AddOffCpu(off);
  }
  // Finishes every output, even after one failed; *error is the first failure.
  bool Finish(const TraceStats& stats, std::string* error) override {
    bool ok = true;
    for (auto& s : sinks_) {
      std::string e;
      if (!s->Finish(stats, &e) && ok) {
        ok = false;
        if (error) *error = e;
      }
    }
    return ok;
  }

 private:
  std::vector<std::unique_ptr<TraceSink>> sinks_;
  std::vector<MemorySink*> memory_;  // those of sinks_ that take memory events
  std::vector<MemoryCategorySink*> categories_;  // ... memory categories
  std::vector<GpuSink*> gpu_;        // ... and GPU activities
  std::vector<ThreadStateSink*> states_;  // ... and threads' times off their CPU
};

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_TRACE_FANOUT_H
