#include "userspace/probe_sets/annotations/annotation_probe_set.h"

#include <algorithm>
#include <cstring>

#include <utility>

#include "userspace/base/clock.h"

namespace torchprobe {

Status AnnotationProbeSet::Attach(const TracedProcess& process) {
  if (!context_.bpf->Program("annot_probe")) return Status::Ok();
  auto attached = links_.find(process.pid);
  if (attached != links_.end() && attached->second.identity == process.torch_identity)
    return Status::Ok();  // a later library load: nothing new for this set
  auto known = plans_.find(process.torch_identity);
  if (known == plans_.end())
    known = plans_.emplace(process.torch_identity, FindAnnotationProbes(process.torch_path, plan_)).first;
  const StatusOr<AnnotationProbes>& probes = known->second;
  Attached result{process.torch_identity, ProbeLinks()};
  bool linked = false;
  if (probes.ok()) {
    ProbeTarget target;
    target.path = process.torch_path;
    target.pid = static_cast<int>(process.pid);
    target.offsets = probes->offsets;
    target.cookies = probes->cookies;
    target.op_cookies = false;
    StatusOr<ProbeLinks> links = ProbeLinks::Attach(context_.bpf->Program("annot_probe"), target, nullptr,
                                                    nullptr, context_.use_uprobe_multi, context_.keeper);
    if (links.ok()) {
      result.links = std::move(*links);
      linked = true;
      model_->SetLive(process.pid, NowNs());
    }
  }
  // A libtorch we do not know, or links that failed: its ops only, counted.
  if (!linked) ++ops_model_->stats().annotations_unprobed;
  links_[process.pid] = std::move(result);
  return Status::Ok();
}

void AnnotationProbeSet::Wire(const ModelWiring& wiring) {
  ops_model_ = wiring.model;
  if (model_) model_->SetModel(wiring.model);
  else model_ = std::make_unique<AnnotationModel>(wiring.model, wiring.ops, wiring.ops_grew);
  model_->KeepMarksMatching(step_marker_);
}

void AnnotationProbeSet::Route(EventRouter& router) {
  // A begin carries its name; an end only the common part: both reach the
  // model as a begin record, the name part zero for an end.
  auto decode = [this](const void* record, size_t size) {
    tp_annot_begin event = {};
    std::memcpy(&event, record, std::min(size, sizeof(event)));
    if (event.a.hdr.type == EV_ANNOT_END) std::memset(event.name, 0, sizeof(event.name));
    if (event.a.name_len > sizeof(event.name)) event.a.name_len = sizeof(event.name);
    model_->OnEvent(event);
  };
  router.OnRaw(EV_ANNOT_BEGIN, sizeof(tp_annot_begin), decode);
  router.OnRaw(EV_ANNOT_END, sizeof(tp_annot_event), decode);
}

}  // namespace torchprobe
