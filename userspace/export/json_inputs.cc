#include "userspace/export/json_inputs.h"

#include <vector>

namespace torchprobe {

namespace {

void AppendList(JsonText& text, const std::vector<int64_t>& values) {
  text.Raw("[");
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) text.Raw(",");
    text.Int(values[i]);
  }
  text.Raw("]");
}

// `[a, b, ...]` with `each(arg)` writing one entry per argument.
template <class Each>
void AppendPerArg(JsonText& text, const OpInputs& inputs, Each each) {
  text.Raw("[");
  for (size_t i = 0; i < inputs.args.size(); ++i) {
    if (i) text.Raw(",");
    each(inputs.args[i]);
  }
  text.Raw("]");
}

}  // namespace

void AppendEtInputs(JsonText& text, const OpInputs* inputs) {
  static const OpInputs kNone;
  const OpInputs& in = inputs ? *inputs : kNone;
  text.Raw("{").Key("values");
  AppendPerArg(text, in, [&](const OpInput& a) {
    if (a.kind != OpInput::kTensor) {
      text.String("");
      return;
    }
    text.Raw("[").UInt(a.tensor_id).Raw(",0,").Int(a.storage_offset).Raw(",").Int(a.numel).Raw(",");
    text.UInt(a.itemsize).Raw(",\"\"]");
  });
  text.Raw(", ").Key("shapes");
  AppendPerArg(text, in, [&](const OpInput& a) { AppendList(text, a.sizes); });
  text.Raw(", ").Key("types");
  AppendPerArg(text, in, [&](const OpInput& a) {
    if (a.kind == OpInput::kTensor) text.String("Tensor(" + a.type + ")");
    else if (a.kind == OpInput::kTensorUnknown) text.String("Tensor");
    else text.String(a.type);
  });
  text.Raw(", ").Key("strides");
  AppendPerArg(text, in, [&](const OpInput& a) { AppendList(text, a.strides); });
  text.Raw("}");
}

void AppendKinetoInputs(JsonText& text, const OpInputs& inputs) {
  text.Raw(", ").Key("Input Dims").Raw(InputDimsJson(inputs));
  text.Raw(", ").Key("Input type").Raw(InputTypesJson(inputs));
  text.Raw(", ").Key("Input Strides").Raw(InputStridesJson(inputs));
}

std::string InputDimsJson(const OpInputs& inputs) {
  JsonText text;
  AppendPerArg(text, inputs, [&](const OpInput& a) { AppendList(text, a.sizes); });
  return text.str();
}

std::string InputTypesJson(const OpInputs& inputs) {
  JsonText text;
  AppendPerArg(text, inputs, [&](const OpInput& a) { text.String(a.type); });
  return text.str();
}

std::string InputStridesJson(const OpInputs& inputs) {
  JsonText text;
  AppendPerArg(text, inputs, [&](const OpInput& a) { AppendList(text, a.strides); });
  return text.str();
}

}  // namespace torchprobe
