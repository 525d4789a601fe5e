// The operators torch.profiler never records: c10's ObservedOperators list
// (aten/src/ATen/core/dispatch/ObservedOperators.cpp). They are the hottest
// trivial ops (aten::size runs inside almost every other op) and
// record_function's own entry and exit, which the profiler shows as the
// user's annotation instead. torchprobe leaves them out the same way:
// at::_ops functions of these ops are not probed, and boxed entries of them
// are dropped with their return.
#ifndef TORCHPROBE_BASE_UNOBSERVED_OPS_H
#define TORCHPROBE_BASE_UNOBSERVED_OPS_H

#include <string_view>

namespace torchprobe {

inline constexpr std::string_view kUnobservedOps[] = {
    "aten::size",
    "aten::is_leaf",
    "aten::output_nr",
    "aten::_version",
    "aten::is_complex",
    "profiler::_record_function_enter",
    "profiler::_record_function_enter_new",
    "profiler::_record_function_exit",
};

inline bool IsUnobservedOp(std::string_view name) {
  for (std::string_view op : kUnobservedOps)
    if (op == name) return true;
  return false;
}

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_UNOBSERVED_OPS_H
