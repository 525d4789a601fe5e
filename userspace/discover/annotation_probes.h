// The annotations probe set: where a record_function range can be seen in
// libtorch with no profiler running (the route is explained in
// bpf/annotations.bpf.c): the functions that pass its name, the
// RecordFunction constructor that begins it and RecordFunction::end().
// Each probe's cookie says which of them it is (enum tp_annot_probe). The
// flight recorder's light tier asks for the name only (kStepMarks).
#ifndef TORCHPROBE_DISCOVER_ANNOTATION_PROBES_H
#define TORCHPROBE_DISCOVER_ANNOTATION_PROBES_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

struct AnnotationProbes {
  std::vector<uint64_t> offsets;  // file offsets in libtorch_cpu
  std::vector<uint64_t> cookies;  // enum tp_annot_probe of each
};

// The kind (enum tp_annot_probe) of an exported libtorch function we probe for
// annotations, by mangled name; -1 for any other.
int AnnotationProbeKind(std::string_view mangled);

enum class AnnotationPlan {
  kRanges,     // every range, begun and ended (record)
  kStepMarks,  // only the names passed, as marks (ANNOT_PROBE_MARK): the one
               // function that passes a record_function's name on every
               // version, the binding's ConstantString::create (else 2.x's
               // record_function_enter_new); never the hot constructor or end()
};

// The probes in `elf_path` (libtorch_cpu); an error naming what is missing
// when the image lacks the constructor or end() (kRanges) or any name
// function: then no annotations.
StatusOr<AnnotationProbes> FindAnnotationProbes(const std::string& elf_path,
                                                AnnotationPlan plan = AnnotationPlan::kRanges);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_ANNOTATION_PROBES_H
