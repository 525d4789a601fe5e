// Where a function returns: the `ret` instructions of its body, found with
// LLVM's x86-64 disassembler (a linear sweep from the symbol's start keeps
// instruction boundaries exact, which a byte search for 0xC3 would not).
//
// Why not uretprobes: a return probe replaces the return address on the
// stack with a kernel trampoline, and a C++ exception unwinding through that
// frame finds no unwind info there and calls std::terminate. PyTorch throws
// through at::_ops::*::call whenever user code catches an op error, so a
// uretprobe would kill the traced program. A uprobe on `ret` leaves the stack
// alone. Returns it cannot see (code GCC split into a cold fragment, tail
// calls, unwinding) the model closes from later events, flagged.
#ifndef TORCHPROBE_DISCOVER_RETURN_SITES_H
#define TORCHPROBE_DISCOVER_RETURN_SITES_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <optional>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

class ReturnSiteFinder {
 public:
  static StatusOr<std::unique_ptr<ReturnSiteFinder>> Create();
  ~ReturnSiteFinder();
  ReturnSiteFinder(const ReturnSiteFinder&) = delete;
  ReturnSiteFinder& operator=(const ReturnSiteFinder&) = delete;

  // The addresses of the `ret` instructions in `code`, the bytes of a
  // function that starts at `vaddr`. Stops at the first byte sequence that
  // does not decode (data or padding), keeping what it found before.
  std::vector<uint64_t> Find(std::string_view code, uint64_t vaddr) const;
  // The target of a direct `jmp` out of the function (a tail call), if
  // there is one: the first such, in address order.
  std::optional<uint64_t> TailCallTarget(std::string_view code, uint64_t vaddr) const;
  // Calls visit(offset in code, length, AT&T text) per instruction until it
  // returns false (the text is valid during the call only).
  void ForEachInstructionText(
      std::string_view code, uint64_t vaddr,
      const std::function<bool(size_t pos, size_t size, const char* text)>& visit) const;

 private:
  ReturnSiteFinder() = default;
  // Calls visit(offset in code, length) per instruction until it returns false.
  void ForEachInstruction(std::string_view code, uint64_t vaddr,
                          const std::function<bool(size_t pos, size_t size)>& visit) const;
  void* disassembler_ = nullptr;  // LLVMDisasmContextRef
};

// True if `insn` (one whole instruction) is a near return: C3 or C2 iw,
// after any legacy prefixes (rep/bnd ret).
bool IsReturnInstruction(std::string_view insn);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_RETURN_SITES_H
