// The function torchprobe times its own probes on: a tiny op-shaped function
// in torchprobe's own image (push %rbp prologue, one `ret`, as most
// at::_ops::*::call begin and end), found and planned like an op, so that a
// child of torchprobe can call it with and without probes (probe_cost.h).
#ifndef TORCHPROBE_DISCOVER_CALIBRATION_OP_H
#define TORCHPROBE_DISCOVER_CALIBRATION_OP_H

#include <cstdint>

#include "userspace/base/calibration_function.h"
#include "userspace/base/status.h"
#include "userspace/discover/op_probes.h"

namespace torchprobe {

// The probe plan of torchprobe_calibration_op in /proc/self/exe: its entry
// and its `ret`, found by the same ELF and disassembler route as ops. Fails
// (saying why) for a stripped binary.
StatusOr<OpProbe> FindCalibrationOp();

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_CALIBRATION_OP_H
