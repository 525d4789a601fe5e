// A custom Python autograd Function's node, torch::autograd::PyNode (in
// libtorch_python): torch.profiler names its ranges after the Python class
// (`autograd::engine::evaluate_function: MyFnBackward` around `MyFnBackward`),
// which PyNode::name() reads as Py_TYPE(obj)->tp_name. So the evaluate-
// function probe also reads the type word of the node's Python object (at
// an offset derived here from PyNode::name()'s own code), userspace reads
// the type's name from the target (bounded, read-only), and PyNode::apply
// is probed so the inner range exists too.
#ifndef TORCHPROBE_DISCOVER_PY_NODE_H
#define TORCHPROBE_DISCOVER_PY_NODE_H

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "userspace/base/status.h"
#include "userspace/discover/op_probes.h"

namespace torchprobe {

class ElfImage;

// PyTypeObject's tp_name: after ob_refcnt, ob_type and ob_size (CPython 3.x).
inline constexpr uint64_t kTypeNameOffset = 0x18;
inline constexpr size_t kMaxTypeName = 256;  // bytes read of a type's name

// The offset of PyNode::obj from PyNode::name()'s code: the load of obj from
// `this`, then of obj's ob_type (+0x8), then of its tp_name (+0x18):
// 1.13: mov 0x188(%rbp),%rax; 2.6: mov 0x1d8(%rbp),%rax.
std::optional<uint32_t> PyNodeObjectOffset(std::string_view name_code);
// ... found in `libtorch_python`'s PyNode::name(); nullopt when absent or
// its code does not have that shape.
std::optional<uint32_t> FindPyNodeObjectOffset(const ElfImage& libtorch_python);
// The libtorch_python that ships beside libtorch_cpu at `host_path` (same
// folder, same suffix: libtorch_cpu.so.1.13 -> libtorch_python.so.1.13),
// also when that is a /proc/PID/map_files/ link; "" if none.
std::string LibtorchPythonBeside(const std::string& host_path);
// The name of the Python type object at `type` in `pid`; nullopt when it
// cannot be read (the process is gone, or that is no type).
std::optional<std::string> ReadPythonTypeName(pid_t pid, uint64_t type);
// PyNode::apply in libtorch_python at `elf_path`, an autograd node probe
// named kPyNodeClass (renamed per call by model/autograd_model).
StatusOr<OpProbeSet> FindPyNodeProbes(const std::string& elf_path);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_PY_NODE_H
