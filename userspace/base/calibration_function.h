// The function torchprobe times its own probes on (attach/probe_cost): a
// tiny op-shaped function in torchprobe's own image (push %rbp prologue,
// one `ret`, as most at::_ops::*::call begin and end). discover plans it
// like an op (calibration_op.h); a child of torchprobe calls it with and
// without probes.
#ifndef TORCHPROBE_BASE_CALIBRATION_FUNCTION_H
#define TORCHPROBE_BASE_CALIBRATION_FUNCTION_H

#include <cstdint>

extern "C" uint64_t torchprobe_calibration_op(uint64_t x);  // returns x

namespace torchprobe {

inline constexpr const char* kCalibrationSymbol = "torchprobe_calibration_op";

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_CALIBRATION_FUNCTION_H
