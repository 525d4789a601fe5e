// Annotation names to op ids, ranges to the op stack model; see the header.
#include "userspace/model/annotation_model.h"

#include "userspace/model/step_slicer.h"

namespace torchprobe {

bool AnnotationModel::BeganAsProbesWentLive(const tp_event_header& begin) const {
  auto live = live_ns_.find(begin.pid);
  return live != live_ns_.end() && begin.ts_ns < live->second + kNamedBeforeTraceNs;
}

uint32_t AnnotationModel::NameId(const tp_annot_begin& event) {
  TraceStats& stats = model_->stats();
  std::string name;
  if (event.a.name_flags & ANNOT_NAME_FAULT) {
    name = kUnreadableAnnotation;
    ++stats.annotation_names_unread;
  } else if ((event.a.name_flags & ANNOT_NAME_BEFORE_TRACE) && BeganAsProbesWentLive(event.a.hdr)) {
    // Attached while the range was being made: its name went by before the
    // probes were live. Not a name torchprobe failed to read.
    name = kNamedBeforeTraceAnnotation;
    ++stats.Count(kNamesBeforeTraceCount);
  } else if (event.a.name_flags & ANNOT_NAME_UNSEEN) {
    name = kUnnamedAnnotation;
    ++stats.annotation_names_unread;
  } else {
    name.assign(event.name, event.a.name_len);
    if (event.a.name_flags & ANNOT_NAME_TRUNCATED) ++stats.annotation_names_cut;
  }
  auto [it, inserted] = ids_.emplace(name, static_cast<uint32_t>(ops_->size()));
  if (inserted) {
    ops_->push_back(OpInfo{name, "", "", kUserAnnotation});
    grew_();
  }
  return it->second;
}

void AnnotationModel::OnEvent(const tp_annot_begin& event) {
  const tp_event_header& h = event.a.hdr;
  if (h.type == EV_ANNOT_BEGIN && (event.a.name_flags & ANNOT_NAME_MARK)) {
    std::string_view name(event.name, event.a.name_flags & ANNOT_NAME_FAULT ? 0 : event.a.name_len);
    if (name.empty() || !MatchesStepMarker(name, mark_filter_)) {
      ++model_->stats().Count(kMarksSkippedCount);
      return;
    }
    ++model_->stats().annotations;
    model_->BeginRange(h.pid, h.tid, NameId(event), kMarkRecord, h.ts_ns);
    model_->EndRange(h.pid, h.tid, kMarkRecord, h.ts_ns);
  } else if (h.type == EV_ANNOT_BEGIN) {
    ++model_->stats().annotations;
    model_->BeginRange(h.pid, h.tid, NameId(event), event.a.record, h.ts_ns);
  } else {
    model_->EndRange(h.pid, event.a.begin_tid, event.a.record, h.ts_ns);
  }
}

}  // namespace torchprobe
