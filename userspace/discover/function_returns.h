// Where a probed function returns to its caller: its own `ret`s or, for a
// stub that only tail-calls another function (`jmp`, no `ret`; libgloo's
// gloo::allreduce is 5 bytes), the `ret`s of that function, whose bounds come
// from .eh_frame_hdr (every function has an unwind entry, named or not).
// A tail-call target may be called from elsewhere too, so its returns are
// marked: the model keeps only those that close an open op.
#ifndef TORCHPROBE_DISCOVER_FUNCTION_RETURNS_H
#define TORCHPROBE_DISCOVER_FUNCTION_RETURNS_H

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace torchprobe {

class ElfImage;
struct ElfSymbol;
class ReturnSiteFinder;

struct FunctionReturns {
  std::vector<uint64_t> offsets;  // file offsets of the `ret`s
  bool via_tail_call = false;     // they are a tail-called function's
};

FunctionReturns FindFunctionReturns(const ElfImage& image, const ReturnSiteFinder& finder,
                                    const ElfSymbol& symbol);

// [begin, end) of the function containing `vaddr`, from .eh_frame_hdr's
// search table (the usual GCC/LLVM encodings only); nullopt if not found.
std::optional<std::pair<uint64_t, uint64_t>> FunctionBounds(const ElfImage& image, uint64_t vaddr);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_FUNCTION_RETURNS_H
