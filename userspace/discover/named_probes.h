// Probe sets of entry points chosen by symbol name (the collectives, the CUDA
// calls): each function a namer accepts becomes an OpProbe like an ATen
// op's, an entry uprobe and its `ret`s, shown under the namer's name.
#ifndef TORCHPROBE_DISCOVER_NAMED_PROBES_H
#define TORCHPROBE_DISCOVER_NAMED_PROBES_H

#include <functional>
#include <optional>
#include <string>

#include "userspace/discover/op_probes.h"

namespace torchprobe {

class ElfImage;
struct ElfSymbol;
class ReturnSiteFinder;

// The slice name for a function symbol, or nullopt to leave it unprobed.
using SymbolNamer = std::function<std::optional<std::string>(const ElfSymbol&)>;

// Appends a probe for every sized function of `image` that `name` accepts;
// a function listed in .dynsym and .symtab is probed once.
void AppendNamedProbes(const ElfImage& image, const ReturnSiteFinder& returns,
                       const SymbolNamer& name, OpProbeSet* set);

// The probe plan for the image at `elf_path`: its named functions only, in
// ascending file offset. An image with none yields an empty set. With
// `cache_tag` (which finder this is), the plan goes through the plan cache
// like libtorch's (probe_plan_cache.h): finding a few names among
// libtorch_python's symbols demangles every one of them, each window again.
StatusOr<OpProbeSet> FindNamedProbes(const std::string& elf_path, const SymbolNamer& name,
                                     std::string_view cache_tag = "");

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_NAMED_PROBES_H
