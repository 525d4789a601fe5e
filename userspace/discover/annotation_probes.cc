// Annotation probe points by mangled name; see the header.
#include "userspace/discover/annotation_probes.h"

#include <elf.h>

#include <memory>
#include <set>

#include "bpf/events.h"
#include "userspace/discover/elf_symbols.h"

namespace torchprobe {
namespace {

constexpr int kName = ANNOT_PROBE_NAME, kBegin = ANNOT_PROBE_BEGIN, kEnd = ANNOT_PROBE_END;

struct Entry {
  std::string_view mangled;
  bool prefix;  // the rest of the name (argument types) differs by version
  int kind;
};
constexpr Entry kEntries[] = {
    // c10::ivalue::ConstantString::create(std::string)
    {"_ZN3c106ivalue14ConstantString6createENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE", false, kName},
    // torch::autograd::profiler::record_function_enter_new(std::string const&, optional<std::string> const&)
    {"_ZN5torch8autograd8profiler25record_function_enter_newERKNSt7__cxx1112basic_string", true, kName},
    // at::RecordFunction::RecordFunction(at::RecordScope), complete and base object
    {"_ZN2at14RecordFunctionC1ENS_11RecordScopeE", false, kBegin},
    {"_ZN2at14RecordFunctionC2ENS_11RecordScopeE", false, kBegin},
    // at::RecordFunction::end()
    {"_ZN2at14RecordFunction3endEv", false, kEnd},
};

}  // namespace

int AnnotationProbeKind(std::string_view mangled) {
  for (const Entry& e : kEntries)
    if (e.prefix ? mangled.starts_with(e.mangled) : mangled == e.mangled) return e.kind;
  return -1;
}

StatusOr<AnnotationProbes> FindAnnotationProbes(const std::string& elf_path) {
  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(elf_path);
  if (!image.ok()) return image.status();
  AnnotationProbes probes;
  std::set<uint64_t> seen;  // C1 and C2 share an address; .dynsym and .symtab a symbol
  bool kinds[3] = {};
  (*image)->ForEachSymbol([&](const ElfSymbol& symbol) {
    if (symbol.type != STT_FUNC) return;
    int kind = AnnotationProbeKind(symbol.name);
    if (kind < 0) return;
    std::optional<uint64_t> offset = (*image)->FileOffset(symbol.vaddr);
    if (!offset || !seen.insert(*offset).second) return;
    probes.offsets.push_back(*offset);
    probes.cookies.push_back(static_cast<uint64_t>(kind));
    kinds[kind] = true;
  });
  if (!kinds[kBegin] || !kinds[kEnd])
    return Status::Error(elf_path + " exports no at::RecordFunction(RecordScope) or RecordFunction::end(): "
                         "annotations cannot be seen");
  if (!kinds[kName])
    return Status::Error(elf_path + " exports nothing that passes a record_function name");
  return probes;
}

}  // namespace torchprobe
