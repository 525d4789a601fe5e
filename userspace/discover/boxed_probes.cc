// Finding the inline copies of Dispatcher::callBoxed; see the header.
#include "userspace/discover/boxed_probes.h"

#include <elf.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/function_returns.h"
#include "userspace/discover/op_symbols.h"
#include "userspace/discover/probe_entry.h"
#include "userspace/discover/return_sites.h"

namespace torchprobe {
namespace {

// What a register or stack slot holds, as far as the walk knows.
struct Value {
  enum Kind { kUnknown, kArg0, kArg1 } kind = kUnknown;
  int64_t offset = 0;  // kArg0: arg0 + offset
  bool operator==(const Value&) const = default;
};

// "%edi" -> "rdi", "%r8d" -> "r8"; "" when `operand` is not a register.
std::string Register64(std::string_view operand) {
  if (operand.size() < 3 || operand[0] != '%') return "";
  std::string name(operand.substr(1));
  if (name.size() >= 2 && name[0] == 'r' && name[1] >= '0' && name[1] <= '9') {
    while (!name.empty() && (name.back() == 'd' || name.back() == 'w' || name.back() == 'b'))
      name.pop_back();
    return name;
  }
  static const std::map<std::string, std::string> kAliases = {
      {"eax", "rax"}, {"ax", "rax"}, {"al", "rax"}, {"ebx", "rbx"}, {"bx", "rbx"}, {"bl", "rbx"},
      {"ecx", "rcx"}, {"cx", "rcx"}, {"cl", "rcx"}, {"edx", "rdx"}, {"dx", "rdx"}, {"dl", "rdx"},
      {"esi", "rsi"}, {"si", "rsi"}, {"sil", "rsi"}, {"edi", "rdi"}, {"di", "rdi"}, {"dil", "rdi"},
      {"ebp", "rbp"}, {"bp", "rbp"}, {"bpl", "rbp"}, {"esp", "rsp"}, {"sp", "rsp"}, {"spl", "rsp"}};
  auto alias = kAliases.find(name);
  if (alias != kAliases.end()) return alias->second;
  if (name.size() == 3 && name[0] == 'r') return name;  // rax, rsi, rbp...
  return "";
}

// One instruction in AT&T text: "\tmovq\t%rdi, 8(%rsp)".
struct Instruction {
  std::string mnemonic;
  std::vector<std::string> operands;  // source(s) first, destination last
};

Instruction Parse(const char* text) {
  Instruction insn;
  std::string_view rest(text);
  while (!rest.empty() && (rest.front() == '\t' || rest.front() == ' ')) rest.remove_prefix(1);
  size_t tab = rest.find_first_of("\t ");
  insn.mnemonic = std::string(rest.substr(0, tab));
  if (tab == std::string_view::npos) return insn;
  rest.remove_prefix(tab + 1);
  int depth = 0;
  std::string current;
  for (char c : rest) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      insn.operands.push_back(current);
      current.clear();
      continue;
    }
    if (c != ' ' || !current.empty()) current += c;
  }
  if (!current.empty()) insn.operands.push_back(current);
  return insn;
}

// "16(%rdi)" -> {16, "rdi"}; nullopt for other forms (indexed, absolute).
std::optional<std::pair<int64_t, std::string>> BaseDisplacement(std::string_view operand) {
  size_t open = operand.find('(');
  if (open == std::string_view::npos || operand.back() != ')') return std::nullopt;
  std::string_view inside = operand.substr(open + 1, operand.size() - open - 2);
  if (inside.find(',') != std::string_view::npos) return std::nullopt;
  std::string reg = Register64(inside);
  if (reg.empty()) return std::nullopt;
  std::string disp(operand.substr(0, open));
  int64_t offset = disp.empty() ? 0 : std::strtoll(disp.c_str(), nullptr, 0);
  return std::make_pair(offset, reg);
}

// A spill slot of the function's frame: "8(%rsp)", "-688(%rbp)".
bool IsFrameSlot(std::string_view operand) {
  std::optional<std::pair<int64_t, std::string>> base = BaseDisplacement(operand);
  return base && (base->second == "rsp" || base->second == "rbp");
}

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

std::optional<BoxedCall> AnalyzeBoxedCall(const ReturnSiteFinder& walker, std::string_view code,
                                          uint64_t vaddr) {
  std::map<std::string, Value> regs = {{"rdi", {Value::kArg0, 0}}, {"rsi", {Value::kArg1, 0}}};
  std::map<std::string, Value> slots;  // by the frame slot's text: "8(%rsp)", "-688(%rbp)"
  std::optional<BoxedCall> found;
  auto value = [&](const std::string& reg) {
    auto it = regs.find(reg);
    return it == regs.end() ? Value{} : it->second;
  };
  // A slot is named by its operand text, so it is forgotten when its base
  // register changes (rbp is a general register without frame pointers).
  auto write = [&](const std::string& reg, Value v) {
    regs[reg] = v;
    std::erase_if(slots, [&](const auto& slot) { return slot.first.ends_with("(%" + reg + ")"); });
  };
  auto clobber_call = [&] {
    for (const char* reg : {"rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11"}) regs.erase(reg);
  };
  walker.ForEachInstructionText(code, vaddr, [&](size_t, size_t, const char* text) {
    Instruction insn = Parse(text);
    const std::string& m = insn.mnemonic;
    bool call = StartsWith(m, "call");
    bool jump = StartsWith(m, "jmp");
    if ((call || jump) && insn.operands.size() == 1 && insn.operands[0][0] == '*') {
      // An indirect call: KernelFunction's boxed function takes (functor,
      // handle, dispatch key set, stack).
      Value handle = value("rsi");
      if (handle.kind == Value::kArg0 && handle.offset >= 0 && handle.offset < 4096 &&
          value("rcx").kind == Value::kArg1) {
        found = BoxedCall{static_cast<uint32_t>(handle.offset)};
        return false;
      }
    }
    if (call) {
      clobber_call();
      return true;
    }
    if (insn.operands.empty()) return true;
    const std::string& dst = insn.operands.back();
    std::string dst_reg = Register64(dst);
    if ((m == "movq" || m == "mov") && insn.operands.size() == 2) {
      const std::string& src = insn.operands[0];
      std::string src_reg = Register64(src);
      if (!dst_reg.empty()) {
        Value v;
        if (!src_reg.empty()) v = value(src_reg);
        else if (auto slot = slots.find(src); slot != slots.end()) v = slot->second;
        write(dst_reg, v);
      } else if (IsFrameSlot(dst)) {
        slots[dst] = src_reg.empty() ? Value{} : value(src_reg);
      }
      return true;
    }
    if ((m == "leaq" || m == "lea") && insn.operands.size() == 2 && !dst_reg.empty()) {
      std::optional<std::pair<int64_t, std::string>> base = BaseDisplacement(insn.operands[0]);
      Value v;
      if (base && value(base->second).kind == Value::kArg0)
        v = Value{Value::kArg0, value(base->second).offset + base->first};
      write(dst_reg, v);
      return true;
    }
    // Anything else that names a register last may have written it.
    bool reads_only = StartsWith(m, "cmp") || StartsWith(m, "test") || StartsWith(m, "bt") ||
                      StartsWith(m, "push") || StartsWith(m, "j");
    if (!dst_reg.empty() && !reads_only) write(dst_reg, Value{});
    return true;
  });
  return found;
}

namespace {

// The addresses a call to `symbol` may target in `image`: its PLT stub
// (lazy .plt or IBT .plt.sec) and the symbol itself where it is defined.
std::set<uint64_t> CallTargets(const ElfImage& image, std::string_view symbol) {
  std::set<uint64_t> targets;
  image.ForEachSymbol([&](const ElfSymbol& s) {
    if (s.name == symbol && s.type == STT_FUNC) targets.insert(s.vaddr);
  });
  const ElfSection *rela_plt = nullptr, *dynsym = nullptr, *dynstr = nullptr, *plt = nullptr,
                   *plt_sec = nullptr;
  for (const ElfSection& s : image.sections()) {
    if (s.name == ".rela.plt") rela_plt = &s;
    if (s.name == ".dynsym") dynsym = &s;
    if (s.name == ".dynstr") dynstr = &s;
    if (s.name == ".plt") plt = &s;
    if (s.name == ".plt.sec") plt_sec = &s;
  }
  if (!rela_plt || !dynsym || !dynstr || !plt) return targets;
  std::string_view relas = image.SectionBytes(*rela_plt);
  std::string_view syms = image.SectionBytes(*dynsym);
  std::string_view strs = image.SectionBytes(*dynstr);
  for (size_t i = 0; (i + 1) * sizeof(Elf64_Rela) <= relas.size(); ++i) {
    Elf64_Rela rela;
    std::memcpy(&rela, relas.data() + i * sizeof(rela), sizeof(rela));
    uint64_t sym_index = ELF64_R_SYM(rela.r_info);
    if ((sym_index + 1) * sizeof(Elf64_Sym) > syms.size()) continue;
    Elf64_Sym sym;
    std::memcpy(&sym, syms.data() + sym_index * sizeof(sym), sizeof(sym));
    // The name ends at its NUL inside .dynstr; a section without one ends
    // no name (the file is the target's: it may end anywhere).
    if (sym.st_name >= strs.size()) continue;
    std::string_view rest = strs.substr(sym.st_name);
    size_t nul = rest.find('\0');
    if (nul == std::string_view::npos) continue;
    std::string_view name = rest.substr(0, nul);
    if (name != symbol) continue;
    // Stub i: .plt.sec + 16 i with IBT, else .plt + 16 (i + 1) after PLT0.
    targets.insert(plt_sec ? plt_sec->vaddr + 16 * i : plt->vaddr + 16 * (i + 1));
  }
  return targets;
}

}  // namespace

size_t AppendBoxedProbes(const ElfImage& image, const ReturnSiteFinder& walker, OpProbeSet* set) {
  std::set<uint64_t> targets = CallTargets(image, kStepCallbacksSymbol);
  if (targets.empty()) return 0;
  // at::_ops functions call it too (their own inline Dispatcher::call).
  std::vector<std::pair<uint64_t, uint64_t>> op_functions;
  for (const ElfSymbol& s : image.FunctionSymbols())
    if (ParseOpsSymbol(s.name)) op_functions.emplace_back(s.vaddr, s.vaddr + s.size);
  std::sort(op_functions.begin(), op_functions.end());
  auto in_op_function = [&](uint64_t vaddr) {
    auto it = std::upper_bound(op_functions.begin(), op_functions.end(),
                               std::make_pair(vaddr, UINT64_MAX));
    return it != op_functions.begin() && vaddr < std::prev(it)->second;
  };
  std::set<uint64_t> seen;  // function starts
  size_t found = 0;
  for (const ElfSection& text : image.sections()) {
    if (text.name != ".text") continue;
    std::string_view bytes = image.SectionBytes(text);
    for (size_t pos = bytes.find('\xE8'); pos != std::string_view::npos && pos + 5 <= bytes.size();
         pos = bytes.find('\xE8', pos + 1)) {
      int32_t rel;
      std::memcpy(&rel, bytes.data() + pos + 1, sizeof(rel));
      uint64_t site = text.vaddr + pos;
      if (!targets.count(site + 5 + static_cast<int64_t>(rel)) || in_op_function(site)) continue;
      std::optional<std::pair<uint64_t, uint64_t>> bounds = FunctionBounds(image, site);
      if (!bounds || !seen.insert(bounds->first).second) continue;
      std::string_view code = image.BytesAt(bounds->first, bounds->second - bounds->first);
      std::optional<BoxedCall> boxed = AnalyzeBoxedCall(walker, code, bounds->first);
      std::optional<uint64_t> entry = EntryProbeOffset(image, bounds->first);
      if (!boxed || !entry) continue;
      ElfSymbol symbol;
      symbol.vaddr = bounds->first;
      symbol.size = bounds->second - bounds->first;
      FunctionReturns exits = FindFunctionReturns(image, walker, symbol);
      OpProbe probe{*entry, std::move(exits.offsets), "", OpInfo{"c10::callBoxed", "", ""}, true};
      probe.tail_returns = exits.via_tail_call;
      probe.boxed = true;
      probe.handle_offset = boxed->handle_offset;
      char name[64];
      std::snprintf(name, sizeof(name), "callBoxed@0x%lx", static_cast<unsigned long>(bounds->first));
      probe.symbol = name;
      if (probe.return_offsets.empty()) ++set->without_returns;
      set->probes.push_back(std::move(probe));
      ++found;
    }
  }
  set->boxed += found;
  return found;
}

}  // namespace torchprobe
