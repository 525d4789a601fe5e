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

class AnnotationModel {
 public:
  // `grew` runs after names were appended to `ops` (a writer learns them).
  AnnotationModel(OpStackModel* model, OpTable* ops, std::function<void()> grew)
      : model_(model), ops_(ops), grew_(std::move(grew)) {}

  void OnEvent(const tp_annot_begin& event);
  // Feeds `model` from now on (a capture window's fresh model).
  void SetModel(OpStackModel* model) { model_ = model; }

 private:
  uint32_t NameId(const tp_annot_begin& event);

  OpStackModel* model_;
  OpTable* ops_;
  std::function<void()> grew_;
  std::unordered_map<std::string, uint32_t> ids_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_ANNOTATION_MODEL_H
