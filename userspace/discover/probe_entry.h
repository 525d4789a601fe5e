// Where a function's entry uprobe goes. On a CET build (Debian's PyTorch
// 2.6) every function begins with `endbr64`, which x86 uprobes cannot
// emulate: the kernel single-steps it, a second trap per hit. The `push`
// that usually follows is emulated, so the probe goes there: the stack
// pointer is still the caller's (endbr64 touches no register), so the
// frame the entry program reports is the same, and nothing jumps to the
// instruction after an endbr64 (branch targets are the endbr64 itself).
// Measured (2.6 small-op loop, 46k ops): 1.22-1.50 s traced with the probe
// on endbr64, 0.50-0.69 s on the push after it.
#ifndef TORCHPROBE_DISCOVER_PROBE_ENTRY_H
#define TORCHPROBE_DISCOVER_PROBE_ENTRY_H

#include <cstdint>
#include <optional>
#include <string_view>

namespace torchprobe {

class ElfImage;

// Bytes to skip at a function that begins with `code`: 4 for an endbr64
// followed by a push (push r64 or REX.B push r64), else 0.
uint64_t EntrySkip(std::string_view code);

// The file offset of the entry probe of the function at `vaddr`; nullopt
// when the file does not back it.
std::optional<uint64_t> EntryProbeOffset(const ElfImage& image, uint64_t vaddr);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_PROBE_ENTRY_H
