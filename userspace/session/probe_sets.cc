#include "userspace/session/probe_sets.h"

#include "userspace/session/annotation_probe_set.h"
#include "userspace/session/cuda_probe_set.h"
#include "userspace/session/memory_probe_set.h"
#include "userspace/session/shapes_probe_set.h"

namespace torchprobe {

StatusOr<std::vector<std::unique_ptr<ProbeSet>>> MakeProbeSets(const RecordOptions& options,
                                                               const OpTable* ops) {
  std::vector<std::unique_ptr<ProbeSet>> sets;
  sets.push_back(std::make_unique<AnnotationProbeSet>());
  std::unique_ptr<GpuCapture> gpu;
  if (options.cupti) {  // now, before a command is launched (it inherits the environment)
                        // or the keeper ptraces the pids (--inject-cupti)
    StatusOr<std::unique_ptr<GpuCapture>> started =
        options.inject_cupti ? GpuCapture::Inject(options.pids, options.quiet, options.wait)
                             : GpuCapture::Start(options.quiet);
    if (!started.ok()) return started.status();
    gpu = std::move(*started);
  }
  sets.push_back(std::make_unique<CudaProbeSet>(ops, std::move(gpu)));
  if (options.memory || !options.memory_timeline.empty()) {
    StatusOr<std::unique_ptr<MemoryProbeSet>> memory = MemoryProbeSet::Open(options.memory_timeline, ops);
    if (!memory.ok()) return memory.status();
    sets.push_back(std::move(*memory));
  }
  if (options.shapes) sets.push_back(std::make_unique<ShapesProbeSet>(ops));
  return sets;
}

}  // namespace torchprobe
