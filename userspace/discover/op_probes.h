// The probe plan for one libtorch image: every at::_ops::<op>::call (the
// top-level dispatcher entry that torch.profiler records; never
// `redispatch`), its file offset for a uprobe, and the operator it is.
#ifndef TORCHPROBE_DISCOVER_OP_PROBES_H
#define TORCHPROBE_DISCOVER_OP_PROBES_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/base/op_table.h"
#include "userspace/base/status.h"

namespace torchprobe {

// OpProbe::collective_layout of autograd's Engine::evaluate_function: entered
// through its own program (bpf/autograd.bpf.c), not a collective's. Past
// enum tp_collective_layout's values; stored as such in probe plan caches.
constexpr uint32_t kAutogradNodeEntry = 3;

struct OpProbe {
  uint64_t file_offset;  // where the entry uprobe goes
  std::vector<uint64_t> return_offsets;  // file offsets of its `ret` instructions
  std::string symbol;    // the mangled at::_ops::<op>::call
  OpInfo op;
  bool resolved;         // false: name/overload guessed, schema ""
  bool tail_returns = false;  // return_offsets are a tail-called function's (see function_returns.h)
  bool boxed = false;         // a copy of Dispatcher::callBoxed (boxed_probes.h): the op is
                              // read at entry from the handle at arg0 + handle_offset
  uint32_t handle_offset = 0;
  // A c10d collective: enum tp_collective_layout (bpf/events.h), and where
  // rank_ and size_ lie in its process group object; entered through
  // collective_enter (bpf/collectives.bpf.c), whose event model/collective_args
  // reads. Or kAutogradNodeEntry (above): not a collective.
  uint32_t collective_layout = 0;
  uint32_t group_rank_offset = 0;
  uint32_t tensor_numel_offset = 0;  // of numel_ in c10::TensorImpl (its TypeMeta follows)
  // kAutogradNodeEntry: where a Python Function's node (PyNode) keeps its
  // Python object, whose type names it (discover/py_node.h); 0: unknown.
  uint32_t node_object_offset = 0;
};

struct OpProbeSet {
  std::string image_path;  // host-openable path the offsets refer to
  std::vector<OpProbe> probes;  // ascending file_offset
  uint64_t unresolved = 0;
  uint64_t without_returns = 0;  // functions in which no `ret` was found
  uint64_t boxed = 0;            // of the probes, copies of Dispatcher::callBoxed
  uint64_t unobserved = 0;       // ops the profiler never records, left out (unobserved_ops.h)
};

// Reads the image at `elf_path` (e.g. MappedImage::host_path). An image with
// no at::_ops symbols yields an empty set, not an error.
StatusOr<OpProbeSet> FindOpProbes(const std::string& elf_path);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_OP_PROBES_H
