#include "userspace/probe_sets/memory/memory_probe_set.h"

#include <cinttypes>
#include <cstdio>
#include <utility>

#include "userspace/base/clock.h"
#include "userspace/probe_sets/memory/memory_links.h"

namespace torchprobe {

StatusOr<std::unique_ptr<MemoryProbeSet>> MemoryProbeSet::Open(const std::string& timeline_path,
                                                               const std::string& snapshot_path, bool categories,
                                                               const OpTable* ops) {
  auto set = std::make_unique<MemoryProbeSet>();
  set->categories_ = categories;
  set->ops_ = ops;
  std::string error;
  if (!timeline_path.empty()) {
    set->timeline_ = MemoryTimeline::Open(timeline_path, ops, &error);
    if (!set->timeline_) return Status::Error(error);
  }
  if (!snapshot_path.empty()) {
    int64_t offset = static_cast<int64_t>(NowNs(CLOCK_REALTIME)) - static_cast<int64_t>(NowNs(CLOCK_MONOTONIC));
    set->snapshot_ = MemorySnapshot::Open(snapshot_path, offset, &error);
    if (!set->snapshot_) return Status::Error(error);
  }
  return set;
}

Status MemoryProbeSet::Attach(const TracedProcess& process) {
  if (!context_.bpf->Program("alloc_enter")) return Status::Ok();
  Process& p = processes_[process.pid];
  Status segments = AttachSegments(process.pid, p);
  if (!segments.ok() || !p.allocator.empty()) return segments;
  StatusOr<MappedImage> image = FindMappedImage(process.pid, kAllocatorLibrary);
  if (!image.ok()) return Status::Ok();  // gone meanwhile (libtorch maps it)
  std::string identity = ImageIdentity(image->host_path);
  if (identity.empty()) return Status::Ok();
  auto found = allocators_.find(identity);
  if (found == allocators_.end()) {
    StatusOr<AllocatorProbes> probes = FindAllocatorProbes(image->host_path);
    if (!probes.ok()) return probes.status();
    found = allocators_.emplace(identity, std::move(*probes)).first;
  }
  StatusOr<std::vector<ProbeLinks>> links = AttachAllocatorLinks(
      *context_.bpf, found->second,
      {image->host_path, static_cast<int>(process.pid), context_.use_uprobe_multi, context_.keeper});
  if (!links.ok()) return links.status();
  for (ProbeLinks& l : *links) p.links.push_back(std::move(l));
  p.allocator = identity;
  return Status::Ok();
}

Status MemoryProbeSet::AttachSegments(uint32_t pid, Process& p) {
  if (!p.cuda_runtime.empty()) return Status::Ok();
  StatusOr<MappedImage> image = FindMappedImage(pid, kCudaRuntimeLibrary);
  if (!image.ok()) return Status::Ok();  // no CUDA (yet)
  std::string identity = ImageIdentity(image->host_path);
  StatusOr<SegmentProbes> probes = FindSegmentProbes(image->host_path);
  if (identity.empty() || !probes.ok()) return Status::Ok();  // gone, or not a runtime we can probe
  StatusOr<std::vector<ProbeLinks>> links = AttachSegmentLinks(
      *context_.bpf, *probes, {image->host_path, static_cast<int>(pid), context_.use_uprobe_multi, context_.keeper});
  if (!links.ok()) return links.status();
  for (ProbeLinks& l : *links) p.links.push_back(std::move(l));
  p.cuda_runtime = identity;
  return Status::Ok();
}

TraceSink* MemoryProbeSet::DecorateSlices(TraceSink* next) {
  if (!categories_) return next;
  std::vector<MemoryCategorySink*> also;
  if (timeline_) also.push_back(timeline_.get());
  if (snapshot_) also.push_back(snapshot_.get());
  window_categories_ = std::make_unique<MemoryCategories>(next, ops_, std::move(also));
  return window_categories_.get();
}

void MemoryProbeSet::Wire(const ModelWiring& wiring) {
  ops_model_ = wiring.model;
  if (timeline_) wiring.memory_also->Add(timeline_.get());
  if (snapshot_) wiring.memory_also->Add(snapshot_.get());
  sinks_ = MemorySinks();
  sinks_.Add(wiring.memory);
  if (window_categories_) {
    sinks_.Add(window_categories_.get());
    if (wiring.files) window_categories_->AddSink(wiring.files);  // not under --steps: its files change hands
    if (wiring.files && wiring.files->empty()) window_categories_->Disable();  // a flight recorder's idle wiring
  }
  model_ = std::make_unique<MemoryModel>(&sinks_, &wiring.model->stats(), wiring.outputs, wiring.names);
}

void MemoryProbeSet::FillStats(TraceStats& stats) {
  stats.memory_traced = true;
  stats.memory_dropped = context_.bpf->Drops(DROP_MEM_FULL);
  model_->Finish();
}

std::string MemoryProbeSet::Summary(const TraceStats& stats) const {
  char line[256];
  std::snprintf(line, sizeof(line),
                "memory: %" PRIu64 " allocations, %" PRIu64 " frees (%" PRIu64
                " of memory allocated before the trace), %" PRIu64 " device allocator events, %" PRIu64
                " memory events dropped",
                stats.allocations, stats.frees, stats.preexisting_frees, stats.device_events,
                stats.memory_dropped);
  return line;
}

}  // namespace torchprobe
