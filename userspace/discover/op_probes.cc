// Builds the op probe plan; see the header. One pass over the symbols
// collects the call functions and any exported constexpr strings; the
// read-only data is only scanned when some op still lacks its schema.
#include "userspace/discover/op_probes.h"

#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "userspace/base/unobserved_ops.h"
#include "userspace/discover/autograd_probes.h"
#include "userspace/discover/boxed_probes.h"
#include "userspace/discover/collective_probes.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/function_returns.h"
#include "userspace/discover/op_names.h"
#include "userspace/discover/op_symbols.h"
#include "userspace/discover/probe_entry.h"
#include "userspace/discover/probe_plan_cache.h"
#include "userspace/discover/return_sites.h"
#include "userspace/discover/schema_strings.h"

namespace torchprobe {

namespace {

StatusOr<OpProbeSet> PlanOpProbes(const ElfImage& image) {
  const std::string& elf_path = image.path();

  std::map<std::string_view, ElfSymbol> calls;  // by struct name
  std::map<std::string_view, OpConstants> constants;
  image.ForEachSymbol([&](const ElfSymbol& symbol) {
    std::optional<OpsSymbol> parsed = ParseOpsSymbol(symbol.name);
    if (!parsed) return;
    if (parsed->member == "call") {
      if ((symbol.type == STT_FUNC || symbol.type == STT_GNU_IFUNC) && symbol.size > 0)
        calls.emplace(parsed->struct_name, symbol);
      return;
    }
    if (symbol.type != STT_OBJECT) return;
    std::optional<std::string>* slot = nullptr;
    if (parsed->member == "name") slot = &constants[parsed->struct_name].name;
    else if (parsed->member == "overload_name") slot = &constants[parsed->struct_name].overload_name;
    else if (parsed->member == "schema_str") slot = &constants[parsed->struct_name].schema_str;
    if (slot == nullptr) return;
    std::optional<uint64_t> pointer = image.PointerAt(symbol.vaddr);
    std::optional<std::string_view> text = pointer ? image.StringAt(*pointer) : std::nullopt;
    if (text) *slot = std::string(*text);
  });

  StatusOr<std::unique_ptr<ReturnSiteFinder>> returns = ReturnSiteFinder::Create();
  if (!returns.ok()) return returns.status();
  OpProbeSet set;
  set.image_path = elf_path;
  std::optional<SchemaStringIndex> index;  // built on first need
  std::set<std::string> known_names;
  std::vector<std::string_view> unresolved_structs;
  for (const auto& [struct_name, symbol] : calls) {
    std::optional<uint64_t> offset = EntryProbeOffset(image, symbol.vaddr);
    if (!offset) continue;  // not backed by the file: nothing to probe
    OpProbe probe{*offset, {}, std::string(symbol.name), {}, false};
    FunctionReturns exits = FindFunctionReturns(image, **returns, symbol);
    probe.return_offsets = std::move(exits.offsets);
    probe.tail_returns = exits.via_tail_call;
    if (probe.return_offsets.empty()) ++set.without_returns;
    std::optional<OpInfo> op;
    auto it = constants.find(struct_name);
    if (it != constants.end()) op = ResolveFromConstants(it->second);
    if (!op) {
      if (!index) index = SchemaStringIndex::Build(image);
      op = ResolveFromSchemaStrings(struct_name, CallArgKinds(probe.symbol.c_str()), *index);
    }
    if (op) {
      probe.op = std::move(*op);
      probe.resolved = true;
      known_names.insert(probe.op.name);
    } else {
      unresolved_structs.push_back(struct_name);
    }
    set.probes.push_back(std::move(probe));
  }
  // What the profiler never records is not probed (aten::size is among the
  // hottest functions of libtorch); guesses cannot name one.
  std::erase_if(set.probes, [&](const OpProbe& probe) {
    if (!probe.resolved || !IsUnobservedOp(probe.op.name)) return false;
    ++set.unobserved;
    return true;
  });
  // c10d's collectives live in libtorch too: probed and named the same way.
  AppendCollectiveProbes(image, **returns, &set);
  // Ops called through the boxed path: the copies of Dispatcher::callBoxed.
  AppendBoxedProbes(image, **returns, &set);
  // Autograd's engine and nodes: their ranges enclose the backward ops.
  AppendAutogradProbes(image, **returns, &set);
  // Guesses last, so they can lean on every name that did resolve.
  for (OpProbe& probe : set.probes) {
    if (probe.resolved) continue;
    std::optional<OpsSymbol> parsed = ParseOpsSymbol(probe.symbol);
    probe.op = GuessOpInfo(parsed ? parsed->struct_name : probe.symbol, known_names);
    ++set.unresolved;
  }
  std::sort(set.probes.begin(), set.probes.end(),
            [](const OpProbe& a, const OpProbe& b) { return a.file_offset < b.file_offset; });
  Status intact = image.Intact();  // a plan read from zeros is no plan (nor a cache entry)
  if (!intact.ok()) return intact;
  return set;
}

}  // namespace

StatusOr<OpProbeSet> FindOpProbes(const std::string& elf_path) {
  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(elf_path);
  if (!image.ok()) return image.status();
  std::string cache = PlanCachePath(elf_path);
  if (std::optional<OpProbeSet> cached = CachedProbePlan(cache, **image, elf_path)) return std::move(*cached);
  StatusOr<OpProbeSet> planned = PlanOpProbes(**image);
  if (planned.ok() && !cache.empty()) StoreProbePlan(cache, **image, *planned);
  return planned;
}

}  // namespace torchprobe
