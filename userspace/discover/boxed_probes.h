// The boxed probe set: where an operator called through the dispatcher's
// boxed path is seen. `torch.ops.*` from Python (FX graphs under
// torch.compile, AOT autograd, inductor's extern kernels), tensor subclasses'
// `__torch_dispatch__`, the TorchScript interpreter and custom ops never enter
// at::_ops::<op>::call: they run `c10::OperatorHandle::callBoxed(Stack&)`,
// i.e. `Dispatcher::callBoxed`, which is inline. Each of the few functions
// the compiler made of it (13 in Debian's 1.13, 12 in 2.6) is probed like an
// op; its entry program reads which operator it was called for from the
// handle (bpf/boxed.bpf.c) and the model names the slice after that op.
//
// Why not another route: `::redispatch` is not called for inference-mode
// tensors, for calls made below autograd, nor for composite ops called
// boxed; `torch::jit::invokeOperatorFromPython` is Python's entry only and
// misses TorchScript; neither sees custom ops. Every boxed call, whatever
// calls it, passes through one of these copies, at the same depth as
// at::_ops::<op>::call: the profiler's top-level dispatcher entry.
//
// Finding the copies in a stripped libtorch: every inline copy of
// Dispatcher::callBoxed calls the exported at::getStepCallbacksUnlessEmpty
// (the profiler's check). The functions that call it (call sites from a byte
// scan of .text for `call rel32` to its PLT stub, bounds from .eh_frame_hdr)
// and are not at::_ops functions are kept when their indirect kernel call
// (`KernelFunction::callBoxed`: functor, handle, key set, stack) is passed
// the function's first argument, or a member of it, as the handle and its
// second argument as the stack: a linear walk of the instructions follows
// the two arguments through registers and stack slots.
#ifndef TORCHPROBE_DISCOVER_BOXED_PROBES_H
#define TORCHPROBE_DISCOVER_BOXED_PROBES_H

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "userspace/discover/op_probes.h"

namespace torchprobe {

class ElfImage;
class ReturnSiteFinder;

// The symbol every inline Dispatcher::callBoxed calls.
inline constexpr std::string_view kStepCallbacksSymbol =
    "_ZN2at27getStepCallbacksUnlessEmptyENS_11RecordScopeE";

// What the walk of one function found: the handle is its first argument
// plus `handle_offset` bytes.
struct BoxedCall {
  uint32_t handle_offset = 0;
};

// Walks the function whose code is `code` (at `vaddr`) and says whether it
// passes (arg0 + k, arg1) to an indirect call as (handle, stack).
std::optional<BoxedCall> AnalyzeBoxedCall(const ReturnSiteFinder& walker, std::string_view code,
                                          uint64_t vaddr);

// The boxed copies of `image`, appended to `set` as OpProbes with
// `boxed` set and their name "c10::callBoxed" (the model renames each slice).
// Returns how many were found.
size_t AppendBoxedProbes(const ElfImage& image, const ReturnSiteFinder& walker, OpProbeSet* set);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_BOXED_PROBES_H
