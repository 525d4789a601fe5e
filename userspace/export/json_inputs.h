// An op's inputs (model/op_inputs.h, --shapes) in the JSON formats: the
// execution trace's `inputs` {values, shapes, types, strides} and Kineto's
// `Input Dims` / `Input type` / `Input Strides` args. One entry per schema
// argument, as PyTorch writes them; what the probes do not read (values of
// non-Tensor arguments, a Tensor's storage and device) is left empty: a
// Tensor's value is [tensor_id, 0, storage_offset, numel, itemsize, ""].
#ifndef TORCHPROBE_EXPORT_JSON_INPUTS_H
#define TORCHPROBE_EXPORT_JSON_INPUTS_H

#include <string>

#include "userspace/export/json_text.h"
#include "userspace/model/op_inputs.h"

namespace torchprobe {

// {"values": [...], "shapes": [...], "types": [...], "strides": [...]};
// all four empty when `inputs` is null.
void AppendEtInputs(JsonText& text, const OpInputs* inputs);
// `, "Input Dims": [...], "Input type": [...], "Input Strides": [...]`
// (with the leading comma), for an args object.
void AppendKinetoInputs(JsonText& text, const OpInputs& inputs);

// The three lists alone, as JSON text (the Perfetto trace's slice args).
std::string InputDimsJson(const OpInputs& inputs);
std::string InputTypesJson(const OpInputs& inputs);
std::string InputStridesJson(const OpInputs& inputs);

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_JSON_INPUTS_H
