// Annotation probe points by mangled name; see the header.
#include "userspace/discover/annotation_probes.h"

#include <elf.h>

#include <memory>
#include <set>

#include "bpf/events.h"
#include "userspace/discover/elf_symbols.h"

namespace torchprobe {
namespace {

constexpr int kName = ANNOT_PROBE_NAME, kBegin = ANNOT_PROBE_BEGIN, kEnd = ANNOT_PROBE_END,
              kCBegin = ANNOT_PROBE_C_BEGIN;

// torch::autograd::profiler::record_function_enter_new(std::string const&, optional<std::string> const&)
constexpr std::string_view kEnterNew = "_ZN5torch8autograd8profiler25record_function_enter_newERKNSt7__cxx1112basic_string";

struct Entry {
  std::string_view mangled;
  bool prefix;  // the rest of the name (argument types) differs by version
  int kind;
};
constexpr Entry kEntries[] = {
    // c10::ivalue::ConstantString::create(std::string)
    {"_ZN3c106ivalue14ConstantString6createENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE", false, kName},
    {kEnterNew, true, kName},
    // at::RecordFunction::RecordFunction(at::RecordScope), complete and base object
    {"_ZN2at14RecordFunctionC1ENS_11RecordScopeE", false, kBegin},
    {"_ZN2at14RecordFunctionC2ENS_11RecordScopeE", false, kBegin},
    // at::RecordFunction::end()
    {"_ZN2at14RecordFunction3endEv", false, kEnd},
    // at::RecordFunction::before(char const*, long): torch.compile's ranges
    // (2.x), which dynamo's C code opens by _pytorch_record_function_enter
    // (libtorch_python), calling it whether or not a profiler listens.
    {"_ZN2at14RecordFunction6beforeEPKcl", false, kCBegin},
};

// Where in a function to put its probe, as an offset from its entry. The
// kernel emulates a few instructions (push, jmp, jcc, call) and single-steps
// the others, which costs ~10x here (see the README's returns): on
// RecordFunction::end(), hit for every RecordFunction destroyed, a probe on
// its first instruction, `cmpb $0,N(%rdi)`, made a record_function range
// ~10x dearer. That compare only sets flags, so the probe goes on the short
// jcc after it: `this` is still in rdi there. A leading endbr64 (CET builds)
// is stepped over too.
uint64_t ProbeOffset(std::string_view code) {
  uint64_t at = 0;
  if (code.starts_with("\xf3\x0f\x1e\xfa")) at = 4;  // endbr64
  auto byte = [&code](uint64_t i) { return i < code.size() ? static_cast<uint8_t>(code[i]) : 0; };
  // cmpb $imm8, disp8(%rdi) = 80 7f disp imm, then jcc rel8 = 70..7f.
  if (byte(at) == 0x80 && byte(at + 1) == 0x7f && (byte(at + 4) & 0xf0) == 0x70) return at + 4;
  return at;
}

}  // namespace

int AnnotationProbeKind(std::string_view mangled) {
  for (const Entry& e : kEntries)
    if (e.prefix ? mangled.starts_with(e.mangled) : mangled == e.mangled) return e.kind;
  return -1;
}

StatusOr<AnnotationProbes> FindAnnotationProbes(const std::string& elf_path, AnnotationPlan plan) {
  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(elf_path);
  if (!image.ok()) return image.status();
  AnnotationProbes probes;
  std::set<uint64_t> seen;  // C1 and C2 share an address; .dynsym and .symtab a symbol
  bool kinds[4] = {};
  uint64_t enter_new = 0, constant_string = 0;  // kStepMarks: the name functions' offsets
  (*image)->ForEachSymbol([&](const ElfSymbol& symbol) {
    if (symbol.type != STT_FUNC) return;
    int kind = AnnotationProbeKind(symbol.name);
    if (kind < 0) return;
    uint64_t vaddr = symbol.vaddr + ProbeOffset((*image)->BytesAt(symbol.vaddr, 16));
    std::optional<uint64_t> offset = (*image)->FileOffset(vaddr);
    if (!offset || !seen.insert(*offset).second) return;
    if (plan == AnnotationPlan::kStepMarks) {
      if (kind == kName) (symbol.name.starts_with(kEnterNew) ? enter_new : constant_string) = *offset;
      return;
    }
    probes.offsets.push_back(*offset);
    probes.cookies.push_back(static_cast<uint64_t>(kind));
    kinds[kind] = true;
  });
  Status intact = (*image)->Intact();
  if (!intact.ok()) return intact;
  if (plan == AnnotationPlan::kStepMarks) {
    // Both pass the name on 2.x (the binding makes the IValue, then the
    // kernel gets it): one of them, or each range would be marked twice.
    // The binding's: 1.13 exports record_function_enter_new too, but its
    // Python calls the legacy _record_function_enter, which never reaches it.
    uint64_t mark = constant_string ? constant_string : enter_new;
    if (!mark) return Status::Error(elf_path + " exports nothing that passes a record_function name");
    probes.offsets.push_back(mark);
    probes.cookies.push_back(ANNOT_PROBE_MARK);
    return probes;
  }
  if (!kinds[kBegin] || !kinds[kEnd])
    return Status::Error(elf_path + " exports no at::RecordFunction(RecordScope) or RecordFunction::end(): "
                         "annotations cannot be seen");
  if (!kinds[kName])
    return Status::Error(elf_path + " exports nothing that passes a record_function name");
  return probes;
}

}  // namespace torchprobe
