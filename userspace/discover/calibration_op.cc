#include "userspace/discover/calibration_op.h"

#include <elf.h>

#include <memory>
#include <optional>

#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/function_returns.h"
#include "userspace/discover/return_sites.h"

// Written in assembly so the compiler can neither inline it nor change its
// shape: the entry probe lands on `push %rbp` (which x86 uprobes emulate, as
// on most ops) and the return probe on its single `ret` (single-stepped).
asm(R"(
  .pushsection .text
  .globl torchprobe_calibration_op
  .type torchprobe_calibration_op, @function
torchprobe_calibration_op:
  .cfi_startproc
  push %rbp
  .cfi_def_cfa_offset 16
  .cfi_offset %rbp, -16
  mov %rsp, %rbp
  mov %rdi, %rax
  pop %rbp
  .cfi_def_cfa %rsp, 8
  ret
  .cfi_endproc
  .size torchprobe_calibration_op, . - torchprobe_calibration_op
  .popsection
)");

namespace torchprobe {

StatusOr<OpProbe> FindCalibrationOp() {
  const std::string path = "/proc/self/exe";
  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(path);
  if (!image.ok()) return image.status();
  std::optional<ElfSymbol> symbol;
  (*image)->ForEachSymbol([&](const ElfSymbol& s) {
    if (!symbol && s.type == STT_FUNC && s.name == "torchprobe_calibration_op") symbol = s;
  });
  if (!symbol) return Status::Error("torchprobe's own binary has no symbol torchprobe_calibration_op (stripped?)");
  std::optional<uint64_t> offset = (*image)->FileOffset(symbol->vaddr);
  if (!offset) return Status::Error("torchprobe_calibration_op is not backed by its file");
  StatusOr<std::unique_ptr<ReturnSiteFinder>> finder = ReturnSiteFinder::Create();
  if (!finder.ok()) return finder.status();
  OpProbe probe{*offset, {}, "torchprobe_calibration_op", OpInfo{"torchprobe::calibration", "", ""}, true};
  probe.return_offsets = FindFunctionReturns(**image, **finder, *symbol).offsets;
  if (probe.return_offsets.empty()) return Status::Error("no `ret` found in torchprobe_calibration_op");
  return probe;
}

}  // namespace torchprobe
