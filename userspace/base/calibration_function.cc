// The calibration function's body; see the header.
#include "userspace/base/calibration_function.h"

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

