// Annotation events -> record_function ranges on their thread's op stack.
// Each distinct name gets an op id past the probed ops in the session's op
// table (category kUserAnnotation) the first time it is seen; a name that
// could not be read is shown as such and counted, as is a name cut short.
#ifndef TORCHPROBE_MODEL_ANNOTATION_MODEL_H
#define TORCHPROBE_MODEL_ANNOTATION_MODEL_H

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "bpf/events.h"
#include "userspace/base/op_table.h"
#include "userspace/model/op_stack_model.h"

namespace torchprobe {

// Shown for a range whose name the probes could not read.
inline constexpr const char* kUnreadableAnnotation = "[record_function name unreadable]";
// ... and for one begun with no name passed before it (C++'s own USER_SCOPE).
inline constexpr const char* kUnnamedAnnotation = "[record_function without a name]";
// ... a range that began as the probes went live, named before they were:
// BPF says its thread passed no name since they went live
// (ANNOT_NAME_BEFORE_TRACE), and it began within kNamedBeforeTraceNs of its
// process' probes going live (a name and its range's begin are one call
// apart; later, the thread's ranges have no name of their own: unnamed).
inline constexpr const char* kNamedBeforeTraceAnnotation = "[record_function named before the trace]";
inline constexpr uint64_t kNamedBeforeTraceNs = 100'000'000;
// Its count (TraceStats::sections).
inline constexpr const char* kNamesBeforeTraceCount = "annotations.names_before_trace";
// The light tier's marks whose name is not a step marker, skipped.
inline constexpr const char* kMarksSkippedCount = "annotations.light_names_skipped";
// The record a mark's zero-length slice is begun and ended with (no
// RecordFunction lies at the top of the address space).
inline constexpr uint64_t kMarkRecord = ~0ull;

class AnnotationModel {
 public:
  // `grew` runs after names were appended to `ops` (a writer learns them).
  AnnotationModel(OpStackModel* model, OpTable* ops, std::function<void()> grew)
      : model_(model), ops_(ops), grew_(std::move(grew)) {}

  void OnEvent(const tp_annot_begin& event);
  // Marks (ANNOT_NAME_MARK, the light tier) become zero-length slices when
  // their name matches `marker` (a step boundary); the names of other marks
  // (1.13's is every str a torch.ops call converts) are skipped, counted.
  void KeepMarksMatching(std::string marker) { mark_filter_ = std::move(marker); }
  // Feeds `model` from now on (a capture window's fresh model).
  void SetModel(OpStackModel* model) { model_ = model; }
  // `pid`'s annotation probes went live at `live_ns` (CLOCK_MONOTONIC); forgotten with the process.
  void SetLive(uint32_t pid, uint64_t live_ns) { live_ns_[pid] = live_ns; }
  void Forget(uint32_t pid) { live_ns_.erase(pid); }

 private:
  uint32_t NameId(const tp_annot_begin& event);
  bool BeganAsProbesWentLive(const tp_event_header& begin) const;

  OpStackModel* model_;
  OpTable* ops_;
  std::function<void()> grew_;
  std::string mark_filter_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::unordered_map<uint32_t, uint64_t> live_ns_;  // by pid
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_ANNOTATION_MODEL_H
