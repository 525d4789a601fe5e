// The collectives probe set: where a c10d collective (all_reduce, broadcast,
// ...) can be seen from outside, named as torch.profiler names it.
//  - `c10d::allreduce_` etc., the dispatcher op, on the calling thread: on
//    PyTorch 1.x the exported c10d::ops::<collective> wrappers (one call per
//    collective, as at::_ops::<op>::call for ATen ops); PyTorch 2.x exports
//    none (the dispatcher kernels are in an anonymous namespace), so the
//    backend's c10d::ProcessGroupGloo::<collective>, which that op calls, is
//    used in their place (it begins a little after and ends a little before).
//  - `gloo:all_reduce` etc., the communication itself, on the Gloo worker
//    thread that runs it: libgloo's gloo::<collective>(Options&) entry points.
// Each becomes an OpProbe like an ATen op's: an entry and its `ret`s.
#ifndef TORCHPROBE_DISCOVER_COLLECTIVE_PROBES_H
#define TORCHPROBE_DISCOVER_COLLECTIVE_PROBES_H

#include <optional>
#include <string>
#include <string_view>

#include "userspace/discover/op_probes.h"

namespace torchprobe {

class ElfImage;
class ReturnSiteFinder;

// The profiler's name for a symbol of libtorch or libgloo, if it is a
// collective entry point we probe: "c10d::allreduce_", "gloo:all_reduce".
// `have_c10d_ops`: the image exports c10d::ops:: wrappers (then the backend
// methods are not probed: they run inside them).
std::optional<std::string> CollectiveName(std::string_view mangled, bool have_c10d_ops);

// Appends the collective probes of `image` to `set`.
void AppendCollectiveProbes(const ElfImage& image, const ReturnSiteFinder& returns,
                            OpProbeSet* set);

// The probe plan for libgloo: its collectives only.
StatusOr<OpProbeSet> FindGlooProbes(const std::string& elf_path);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_COLLECTIVE_PROBES_H
