// LLVM-disassembler sweep for return instructions; see the header.
#include "userspace/discover/return_sites.h"

#include <llvm-c/Disassembler.h>
#include <llvm-c/Target.h>

#include <cstring>
#include <mutex>

namespace torchprobe {

bool IsReturnInstruction(std::string_view insn) {
  size_t i = 0;
  while (i < insn.size()) {
    auto byte = static_cast<unsigned char>(insn[i]);
    bool legacy_prefix = byte == 0xF2 || byte == 0xF3 || byte == 0x66 || byte == 0x2E ||
                         byte == 0x3E || byte == 0x26 || byte == 0x64 || byte == 0x65 ||
                         byte == 0x36;
    if (!legacy_prefix) break;
    ++i;
  }
  if (i >= insn.size()) return false;
  auto opcode = static_cast<unsigned char>(insn[i]);
  size_t rest = insn.size() - i;
  return (opcode == 0xC3 && rest == 1) || (opcode == 0xC2 && rest == 3);
}

StatusOr<std::unique_ptr<ReturnSiteFinder>> ReturnSiteFinder::Create() {
  static std::once_flag init;
  std::call_once(init, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86Disassembler();
  });
  std::unique_ptr<ReturnSiteFinder> finder(new ReturnSiteFinder());
  finder->disassembler_ = LLVMCreateDisasm("x86_64-pc-linux-gnu", nullptr, 0, nullptr, nullptr);
  if (!finder->disassembler_)
    return Status::Error("cannot create LLVM's x86-64 disassembler (to find return instructions)");
  return finder;
}

ReturnSiteFinder::~ReturnSiteFinder() {
  if (disassembler_) LLVMDisasmDispose(static_cast<LLVMDisasmContextRef>(disassembler_));
}

void ReturnSiteFinder::ForEachInstruction(
    std::string_view code, uint64_t vaddr,
    const std::function<bool(size_t pos, size_t size)>& visit) const {
  ForEachInstructionText(code, vaddr,
                         [&](size_t pos, size_t size, const char*) { return visit(pos, size); });
}

void ReturnSiteFinder::ForEachInstructionText(
    std::string_view code, uint64_t vaddr,
    const std::function<bool(size_t pos, size_t size, const char* text)>& visit) const {
  auto* bytes = reinterpret_cast<uint8_t*>(const_cast<char*>(code.data()));
  char text[128];
  size_t pos = 0;
  while (pos < code.size()) {
    size_t size = LLVMDisasmInstruction(static_cast<LLVMDisasmContextRef>(disassembler_),
                                        bytes + pos, code.size() - pos, vaddr + pos, text,
                                        sizeof(text));
    if (size == 0 || !visit(pos, size, text)) break;
    pos += size;
  }
}

std::vector<uint64_t> ReturnSiteFinder::Find(std::string_view code, uint64_t vaddr) const {
  std::vector<uint64_t> sites;
  ForEachInstruction(code, vaddr, [&](size_t pos, size_t size) {
    if (IsReturnInstruction(code.substr(pos, size))) sites.push_back(vaddr + pos);
    return true;
  });
  return sites;
}

std::optional<uint64_t> ReturnSiteFinder::TailCallTarget(std::string_view code, uint64_t vaddr) const {
  std::optional<uint64_t> found;
  ForEachInstruction(code, vaddr, [&](size_t pos, size_t size) {
    auto opcode = static_cast<uint8_t>(code[pos]);
    int64_t displacement = 0;
    if (opcode == 0xE9 && size == 5) {  // jmp rel32
      int32_t rel;
      std::memcpy(&rel, code.data() + pos + 1, sizeof(rel));
      displacement = rel;
    } else if (opcode == 0xEB && size == 2) {  // jmp rel8
      displacement = static_cast<int8_t>(code[pos + 1]);
    }
    uint64_t target = vaddr + pos + size + static_cast<uint64_t>(displacement);
    if (displacement != 0 && (target < vaddr || target >= vaddr + code.size())) found = target;
    return !found;
  });
  return found;
}

}  // namespace torchprobe
