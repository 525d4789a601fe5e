// Collective entry points by their mangled names; see the header.
#include "userspace/discover/collective_probes.h"

#include <elf.h>

#include <cstdlib>

#include "bpf/events.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/named_probes.h"

namespace torchprobe {
namespace {

struct Rename {
  std::string_view from;
  std::string_view to;
};

// c10d method or wrapper -> the dispatcher op the profiler shows.
constexpr Rename kC10dOps[] = {
    {"allreduce", "c10d::allreduce_"},
    {"allreduce_coalesced", "c10d::allreduce_coalesced_"},
    {"broadcast", "c10d::broadcast_"},
    {"allgather", "c10d::allgather_"},
    {"_allgather_base", "c10d::_allgather_base_"},
    {"allgather_coalesced", "c10d::allgather_coalesced_"},
    {"allgather_into_tensor_coalesced", "c10d::allgather_into_tensor_coalesced_"},
    {"reduce_scatter", "c10d::reduce_scatter_"},
    {"_reduce_scatter_base", "c10d::_reduce_scatter_base_"},
    {"reduce_scatter_tensor_coalesced", "c10d::reduce_scatter_tensor_coalesced_"},
    {"reduce", "c10d::reduce_"},
    {"gather", "c10d::gather_"},
    {"scatter", "c10d::scatter_"},
    {"alltoall", "c10d::alltoall_"},
    {"alltoall_base", "c10d::alltoall_base_"},
    {"barrier", "c10d::barrier"},
    {"send", "c10d::send"},
    {"recv", "c10d::recv_"},
};

// gloo::<function> -> ProcessGroupGloo's profiling title for it.
constexpr Rename kGloo[] = {
    {"allreduce", "gloo:all_reduce"}, {"broadcast", "gloo:broadcast"},
    {"allgather", "gloo:all_gather"}, {"allgatherv", "gloo:all_gather"},
    {"barrier", "gloo:barrier"},      {"reduce", "gloo:reduce"},
    {"gather", "gloo:gather"},        {"gatherv", "gloo:gather"},
    {"scatter", "gloo:scatter"},      {"alltoall", "gloo:all_to_all"},
    {"alltoallv", "gloo:all_to_all"},
};

constexpr std::string_view kC10dOpsPrefix = "_ZN4c10d3ops";
constexpr std::string_view kGlooBackendPrefix = "_ZN4c10d16ProcessGroupGloo";
constexpr std::string_view kGlooPrefix = "_ZN4gloo";

// After `prefix`: <length><name>E...; the name, or "" if it is not so.
std::string_view NestedName(std::string_view mangled, std::string_view prefix) {
  if (!mangled.starts_with(prefix)) return {};
  mangled.remove_prefix(prefix.size());
  size_t digits = 0;
  while (digits < mangled.size() && mangled[digits] >= '0' && mangled[digits] <= '9') ++digits;
  if (digits == 0 || digits > 3) return {};
  size_t length = std::strtoul(std::string(mangled.substr(0, digits)).c_str(), nullptr, 10);
  if (digits + length >= mangled.size() || mangled[digits + length] != 'E') return {};
  return mangled.substr(digits, length);
}

template <size_t N>
std::optional<std::string> Lookup(const Rename (&table)[N], std::string_view name) {
  for (const Rename& r : table)
    if (r.from == name) return std::string(r.to);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> CollectiveName(std::string_view mangled, bool have_c10d_ops) {
  if (std::string_view name = NestedName(mangled, kC10dOpsPrefix); !name.empty())
    return Lookup(kC10dOps, name);
  if (std::string_view name = NestedName(mangled, kGlooBackendPrefix); !name.empty())
    return have_c10d_ops ? std::nullopt : Lookup(kC10dOps, name);
  // gloo::allreduce(gloo::AllreduceOptions const&), gloo::broadcast(gloo::BroadcastOptions&)...
  if (std::string_view name = NestedName(mangled, kGlooPrefix); !name.empty()) {
    std::string_view rest = mangled.substr(mangled.find(name) + name.size());
    if (rest.starts_with("ERNS_") || rest.starts_with("ERKNS_")) return Lookup(kGloo, name);
  }
  return std::nullopt;
}

void AppendCollectiveProbes(const ElfImage& image, const ReturnSiteFinder& returns,
                            OpProbeSet* set) {
  bool have_c10d_ops = false;
  image.ForEachSymbol([&](const ElfSymbol& symbol) {
    have_c10d_ops |= symbol.name.starts_with(kC10dOpsPrefix) && symbol.type == STT_FUNC;
  });
  size_t first = set->probes.size();
  AppendNamedProbes(image, returns,
                    [&](const ElfSymbol& symbol) { return CollectiveName(symbol.name, have_c10d_ops); },
                    set);
  // Where rank_ (then size_) lies: the constructors store them there,
  // c10d::ProcessGroup::ProcessGroup(int, int) at 0x18 in 1.13 (after
  // intrusive_ptr_target's vtable and two 8-byte counts), c10d::Backend::
  // Backend(int, int) at 0x10 in 2.6 (4-byte counts); each version pairs
  // with one layout, the c10d::ops wrappers being 1.x's only. TensorImpl's
  // numel_: what c10::TensorImpl::numel_custom() const (libc10) returns
  // for a plain tensor, 0xa8(%rdi) in 1.13, 0xa0(%rdi) in 2.6.
  for (size_t i = first; i < set->probes.size(); ++i) {
    OpProbe& probe = set->probes[i];
    if (probe.symbol.starts_with(kC10dOpsPrefix)) {
      probe.collective_layout = TP_COLLECTIVE_BY_HOLDER;
      probe.group_rank_offset = 0x18;
      probe.tensor_numel_offset = 0xa8;
    } else if (probe.symbol.starts_with(kGlooBackendPrefix)) {
      probe.collective_layout = TP_COLLECTIVE_BY_THIS;
      probe.group_rank_offset = 0x10;
      probe.tensor_numel_offset = 0xa0;
    }
  }
}

StatusOr<OpProbeSet> FindGlooProbes(const std::string& elf_path) {
  // libgloo holds no c10d::ops wrappers (they are libtorch's).
  return FindNamedProbes(
      elf_path, [](const ElfSymbol& symbol) { return CollectiveName(symbol.name, false); }, "gloo");
}

}  // namespace torchprobe
