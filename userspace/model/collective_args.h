// The arguments of a c10d collective's slice (c10d::allreduce_, ...), from
// what its entry read (bpf/collectives.bpf.c, tp_collective_event): its process
// group's address, rank and size, how many tensors it was given and their bytes.
#ifndef TORCHPROBE_MODEL_COLLECTIVE_ARGS_H
#define TORCHPROBE_MODEL_COLLECTIVE_ARGS_H

#include <string_view>

#include "bpf/events.h"
#include "userspace/model/slice_args.h"

namespace torchprobe {

// `rank`, `group_size` and `process_group` (hex address) when the group
// could be read and is consistent (0 <= rank < size); `tensors` for `op`s
// whose first argument is the tensor list (allreduce_, broadcast_, ...),
// with their `bytes` (numel x element size, summed) when of one dtype.
SliceArgs CollectiveArgs(std::string_view op, const tp_collective_event& event);

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_COLLECTIVE_ARGS_H
