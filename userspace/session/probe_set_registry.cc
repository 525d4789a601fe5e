#include "userspace/session/probe_set_registry.h"

#include "userspace/model/step_slicer.h"
#include "userspace/probe_sets/annotations/annotation_probe_set.h"
#include "userspace/probe_sets/cuda/cuda_probe_set.h"
#include "userspace/probe_sets/memory/memory_probe_set.h"
#include "userspace/probe_sets/oom/oom_probe_set.h"
#include "userspace/probe_sets/python/python_probe_set.h"
#include "userspace/probe_sets/sched/sched_probe_set.h"
#include "userspace/probe_sets/shapes/shapes_probe_set.h"

namespace torchprobe {

std::function<bool(const OpProbe&)> LightTierProbe(const std::string& step_marker) {
  std::string marker = step_marker.empty() ? kDefaultStepMarker : step_marker;
  return [marker](const OpProbe& probe) {
    const std::string& name = probe.op.name;
    bool collective = probe.collective_layout && probe.collective_layout != kAutogradNodeEntry;
    bool runs_one = name.rfind("gloo:", 0) == 0 || name.rfind("nccl", 0) == 0;  // a collective's own work
    bool waits = name.find("Synchronize") != std::string::npos;
    return collective || runs_one || waits || MatchesStepMarker(name, marker);
  };
}

StatusOr<RunProbeSets> MakeProbeSets(const RecordOptions& options, OpTable* ops) {
  RunProbeSets sets;
  OpsOptions op_options{options.returns, options.empty_probes, options.empty_uretprobes, options.quiet, nullptr};
  if (options.flight.light) op_options.probe_only = LightTierProbe(options.step_marker);
  auto op_set = std::make_unique<OpsProbeSet>(std::move(op_options), ops);
  sets.ops = op_set.get();
  sets.all.push_back(std::move(op_set));
  if (options.flight.light)  // step boundaries only: the hot RecordFunction probes stay off
    sets.all.push_back(std::make_unique<AnnotationProbeSet>(
        AnnotationPlan::kStepMarks, options.step_marker.empty() ? kDefaultStepMarker : options.step_marker));
  else
    sets.all.push_back(std::make_unique<AnnotationProbeSet>());
  std::unique_ptr<GpuCapture> gpu;
  if (options.cupti) {  // now, before a command is launched (it inherits the environment)
                        // or the keeper ptraces the pids (--inject-cupti)
    StatusOr<std::unique_ptr<GpuCapture>> started =
        options.inject_cupti ? GpuCapture::Inject(options.pids, options.quiet, options.wait)
                             : GpuCapture::Start(options.quiet);
    if (!started.ok()) return started.status();
    gpu = std::move(*started);
  }
  sets.all.push_back(std::make_unique<CudaProbeSet>(ops, std::move(gpu)));
  if (options.memory) {
    StatusOr<std::unique_ptr<MemoryProbeSet>> memory =
        MemoryProbeSet::Open(options.memory_timeline, options.memory_snapshot, options.shapes, ops);
    if (!memory.ok()) return memory.status();
    sets.all.push_back(std::move(*memory));
  }
  if (options.shapes) sets.all.push_back(std::make_unique<ShapesProbeSet>(ops, options.memory));
  if (options.python_stacks) sets.all.push_back(std::make_unique<PythonProbeSet>(ops, options.quiet));
  if (options.sched) sets.all.push_back(std::make_unique<SchedProbeSet>(options.quiet));
  // Fires only on a failure; with a flight recorder only, for now: its links
  // are never hit, and a window's keeper then waits for the target's exit.
  if (options.flight.seconds > 0) sets.all.push_back(std::make_unique<OomProbeSet>());
  std::vector<const ProbeSet*> readers;
  for (const auto& set : sets.all) readers.push_back(set.get());
  sets.ops->SetOpReaders(std::move(readers));
  return sets;
}

}  // namespace torchprobe
