// The annotations probe set: record_function ranges (the user's, the
// optimizer's, the DataLoader's) on the libtorch a process has attached.
// Discovery is discover/annotation_probes, the BPF side
// bpf/annotations.bpf.c, the model model/annotation_model.
#ifndef TORCHPROBE_PROBE_SETS_ANNOTATION_PROBE_SET_H
#define TORCHPROBE_PROBE_SETS_ANNOTATION_PROBE_SET_H

#include <map>
#include <memory>
#include <string>

#include "userspace/discover/annotation_probes.h"
#include "userspace/model/annotation_model.h"
#include "userspace/probe_sets/probe_set.h"

namespace torchprobe {

class AnnotationProbeSet : public ProbeSet {
 public:
  // kStepMarks (the flight recorder's light tier): only names passed, kept
  // as step boundaries when they match `step_marker`.
  explicit AnnotationProbeSet(AnnotationPlan plan = AnnotationPlan::kRanges, std::string step_marker = "")
      : plan_(plan), step_marker_(std::move(step_marker)) {}
  void Configure(BpfConfig& config) const override { config.Want("annot_probe", "empty_enter"); }  // annotations.bpf.c
  Status Attach(const TracedProcess& process) override;
  void Release(uint32_t pid) override {
    links_.erase(pid);
    model_->Forget(pid);
  }
  void Wire(const ModelWiring& wiring) override;
  void Route(EventRouter& router) override;

 private:
  struct Attached {
    std::string identity;  // the libtorch its links are on
    ProbeLinks links;
  };
  AnnotationPlan plan_;
  std::string step_marker_;
  std::unique_ptr<AnnotationModel> model_;
  OpStackModel* ops_model_ = nullptr;
  // Found once per image: children forked one after another are attached
  // without reading libtorch's symbols again.
  std::map<std::string, StatusOr<AnnotationProbes>> plans_;  // by image identity
  std::map<uint32_t, Attached> links_;                        // by pid
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_ANNOTATION_PROBE_SET_H
