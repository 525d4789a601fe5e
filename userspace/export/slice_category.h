// What a slice is to the JSON formats, decided from its name alone so that
// every slice kind the model grows (record_function annotations, autograd
// nodes, ...) is written without the writers knowing where it came from:
//  - a name with a "::" namespace ("aten::mm", "torchvision::nms",
//    "autograd::engine::evaluate_function: MmBackward0") is an operator:
//    Kineto's `cpu_op`, ET scope FUNCTION (BACKWARD_FUNCTION for autograd,
//    and for a node's own range, "MmBackward0", though it has no "::");
//  - "FILE(LINE): FUNCTION" is a Python frame (--python-stacks): Kineto's
//    `python_function`, no ET node;
//  - anything else ("## LOOP 0 ##", "ProfilerStep#3", "nn.Module: Linear_0",
//    "Optimizer.step#SGD.step") is a record_function annotation: Kineto's
//    `user_annotation`, ET scope USER_SCOPE.
#ifndef TORCHPROBE_EXPORT_SLICE_CATEGORY_H
#define TORCHPROBE_EXPORT_SLICE_CATEGORY_H

#include <cstdint>
#include <string_view>

namespace torchprobe {

struct SliceCategory {
  const char* kineto_cat;  // "cpu_op", "user_annotation", "cuda_runtime", "cuda_driver" or "python_function"
  uint64_t et_scope;       // at::RecordScope: 0 FUNCTION, 1 BACKWARD_FUNCTION, 7 USER_SCOPE
  bool record_function = true;  // a RecordFunction to PyTorch: an ET node, a Kineto
                                // `Record function id`; CUDA API calls are not
  bool python_frame = false;    // a Python frame (--python-stacks): no ET node, its
                                // slices' children belong to its parent there
};

// A Python frame as torch.profiler names one: "FILE(LINE): FUNCTION"
// (model/python_frames.h), e.g. "train.py(12): step", "<truncated>(0): ...".
inline bool IsPythonFrameName(std::string_view name) {
  size_t close = name.find("): ");
  if (close == std::string_view::npos || close == 0) return false;
  size_t open = name.rfind('(', close);
  if (open == std::string_view::npos || open == 0 || open + 1 == close) return false;
  for (size_t i = open + 1; i < close; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

// An autograd node's own range: "AddmmBackward0" (generated nodes' names end
// in Backward and a version), "torch::autograd::AccumulateGrad".
inline bool IsAutogradNodeName(std::string_view name) {
  while (!name.empty() && name.back() >= '0' && name.back() <= '9') name.remove_suffix(1);
  return name.ends_with("Backward") || name.starts_with("torch::autograd::");
}

inline SliceCategory CategoryOf(std::string_view name) {
  if (IsPythonFrameName(name)) return {"python_function", 7, false, true};
  if (name.starts_with("autograd::") || IsAutogradNodeName(name)) return {"cpu_op", 1};
  // CUDA runtime and driver calls (cudaLaunchKernel, cuLaunchKernel): Kineto's
  // categories; PyTorch's ET has no node for them.
  auto api = [&name](std::string_view prefix) {
    return name.starts_with(prefix) && name.size() > prefix.size() && name[prefix.size()] >= 'A' &&
           name[prefix.size()] <= 'Z';
  };
  if (api("cuda")) return {"cuda_runtime", 7, false};
  if (api("cu")) return {"cuda_driver", 7, false};
  if (name.find("::") == std::string_view::npos) return {"user_annotation", 7};
  return {"cpu_op", 0};
}

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_SLICE_CATEGORY_H
