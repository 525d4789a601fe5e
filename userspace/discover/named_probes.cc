// Entry points by name: one OpProbe per accepted function; see the header.
#include "userspace/discover/named_probes.h"

#include <elf.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/function_returns.h"
#include "userspace/discover/probe_plan_cache.h"
#include "userspace/discover/probe_entry.h"
#include "userspace/discover/return_sites.h"

namespace torchprobe {

void AppendNamedProbes(const ElfImage& image, const ReturnSiteFinder& returns,
                       const SymbolNamer& name, OpProbeSet* set) {
  image.ForEachSymbol([&](const ElfSymbol& symbol) {
    if (symbol.type != STT_FUNC || symbol.size == 0) return;
    std::optional<std::string> shown = name(symbol);
    if (!shown) return;
    // Past a leading endbr64 (CET builds: 2.6's autograd nodes, collectives),
    // which the kernel would single-step on every hit.
    std::optional<uint64_t> offset = EntryProbeOffset(image, symbol.vaddr);
    if (!offset) return;
    for (const OpProbe& known : set->probes)
      if (known.file_offset == *offset) return;
    OpProbe probe{*offset, {}, std::string(symbol.name), OpInfo{*shown, "", ""}, true};
    FunctionReturns exits = FindFunctionReturns(image, returns, symbol);
    probe.return_offsets = std::move(exits.offsets);
    probe.tail_returns = exits.via_tail_call;
    if (probe.return_offsets.empty()) ++set->without_returns;
    set->probes.push_back(std::move(probe));
  });
}

StatusOr<OpProbeSet> FindNamedProbes(const std::string& elf_path, const SymbolNamer& name,
                                     std::string_view cache_tag) {
  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(elf_path);
  if (!image.ok()) return image.status();
  std::string cache = cache_tag.empty() ? "" : PlanCachePath(elf_path);
  if (!cache.empty()) cache += "." + std::string(cache_tag);
  if (std::optional<OpProbeSet> cached = CachedProbePlan(cache, **image, elf_path)) return std::move(*cached);
  StatusOr<std::unique_ptr<ReturnSiteFinder>> returns = ReturnSiteFinder::Create();
  if (!returns.ok()) return returns.status();
  OpProbeSet set;
  set.image_path = elf_path;
  AppendNamedProbes(**image, **returns, name, &set);
  Status intact = (*image)->Intact();
  if (!intact.ok()) return intact;
  std::sort(set.probes.begin(), set.probes.end(),
            [](const OpProbe& a, const OpProbe& b) { return a.file_offset < b.file_offset; });
  if (!cache.empty()) StoreProbePlan(cache, **image, set);
  return set;
}

}  // namespace torchprobe
