// The out-of-memory probe set; see the header.
#include "userspace/probe_sets/oom/oom_probe_set.h"

#include "userspace/base/counted.h"
#include "userspace/base/proc_maps.h"
#include "userspace/discover/allocator_probes.h"
#include "userspace/model/oom_event.h"

namespace torchprobe {

Status OomProbeSet::Attach(const TracedProcess& process) {
  if (!context_.bpf->Program("oom_enforce") || links_.count(process.pid)) return Status::Ok();
  StatusOr<MappedImage> image = FindMappedImage(process.pid, kAllocatorLibrary);
  if (!image.ok()) return Status::Ok();  // not mapped yet (libtorch maps it)
  std::string identity = ImageIdentity(image->host_path);
  if (identity.empty()) return Status::Ok();  // gone meanwhile
  auto plan = plans_.find(identity);
  if (plan == plans_.end()) plan = plans_.emplace(identity, FindOomProbes(image->host_path)).first;
  std::vector<ProbeLinks>& links = links_[process.pid];
  if (!plan->second.ok()) {
    ++unprobed_;
    return Status::Ok();
  }
  FunctionPlace where{image->host_path, static_cast<int>(process.pid), context_.use_uprobe_multi, context_.keeper};
  std::vector<std::pair<const char*, uint64_t>> points;
  for (uint64_t offset : plan->second->enforce_offsets) points.push_back({"oom_enforce", offset});
  if (plan->second->device_offset) points.push_back({"oom_device", plan->second->device_offset});
  for (auto [program, offset] : points) {
    StatusOr<ProbeLinks> attached = AttachFunction(where, context_.bpf->Program(program), offset);
    if (!attached.ok()) {  // the run goes on without them, counted
      ++unprobed_;
      return Status::Ok();
    }
    links.push_back(std::move(*attached));
  }
  return Status::Ok();
}

void OomProbeSet::Route(EventRouter& router) {
  router.On<tp_oom_event>({EV_OOM}, [this](const tp_oom_event& event) {
    OomFacts facts = DescribeOom(event);
    // Once each: a flight recorder replays the same event into every dump.
    if (facts.out_of_memory && counted_.insert({event.hdr.tid, event.hdr.ts_ns}).second)
      seen_.push_back("pid " + std::to_string(event.hdr.pid) + " at " + facts.where);
  });
}

std::string OomProbeSet::Summary(const TraceStats&) const {
  std::string line;
  if (!seen_.empty()) {
    line = Counted(seen_.size(), "out-of-memory error", "out-of-memory errors") + " raised:";
    for (size_t i = 0; i < seen_.size() && i < 5; ++i) line += (i ? ", " : " ") + seen_[i];
    if (seen_.size() > 5) line += ", ...";
  }
  if (unprobed_)
    line += std::string(line.empty() ? "" : "; ") + Counted(unprobed_, "process", "processes") +
            " whose libc10 could not be probed: their out-of-memory errors are not seen";
  return line;
}

}  // namespace torchprobe
