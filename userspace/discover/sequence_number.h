// Where a thread's autograd sequence number lives: the profiler's `Sequence
// number` (`seq_id` in the execution trace) of an op is
// at::sequence_number::peek() when the op begins, a thread_local uint64_t of
// libtorch_cpu (each new grad_fn takes it with get_and_increment()). Both
// functions are exported and tiny in 1.13 and 2.6; peek() is
//   lea TLS_INDEX(%rip),%rdi; call __tls_get_addr; mov DISP(%rax),%rax
// so the variable is at DTV[modid] + ti_offset + DISP, where the relocated
// tls_index {modid, ti_offset} is in the process' GOT. Groundwork for
// reading it at op entry in BPF (fs base -> DTV -> block); nothing reads it
// there yet.
#ifndef TORCHPROBE_DISCOVER_SEQUENCE_NUMBER_H
#define TORCHPROBE_DISCOVER_SEQUENCE_NUMBER_H

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "userspace/base/proc_maps.h"
#include "userspace/discover/elf_symbols.h"

namespace torchprobe {

struct SequenceNumberTls {
  uint64_t tls_index_vaddr = 0;  // the GOT's tls_index, an address in the ELF image
  int64_t displacement = 0;      // added to what __tls_get_addr returns
};

// From the code of peek() at `peek_vaddr`; nullopt when it is not that shape.
std::optional<SequenceNumberTls> SequenceNumberTlsFromPeek(uint64_t peek_vaddr, std::string_view code);
// From libtorch_cpu's at::sequence_number::peek().
std::optional<SequenceNumberTls> FindSequenceNumberTls(const ElfImage& libtorch_cpu);

// Reads a thread's sequence number from outside (process_vm_readv, bounded,
// read-only): `fs_base` is the thread's TLS pointer (glibc: its DTV at
// fs_base + 8), `tls_index` the runtime address of the tls_index. nullopt
// when unreadable; 0 when the thread never touched the variable (its DTV
// slot not allocated yet: the number it would start at).
std::optional<uint64_t> ReadSequenceNumber(pid_t pid, uint64_t fs_base, uint64_t tls_index,
                                           const SequenceNumberTls& where);

// Where the number is in every thread of one process, what BPF reads at op
// entry (bpf/shapes.bpf.c): the DTV slot of libtorch's TLS block and the
// variable's offset in it, from the process' relocated tls_index.
struct SequenceNumberPlace {
  uint64_t module = 0;  // DTV index (tls_index.ti_module)
  uint64_t offset = 0;  // ti_offset + displacement
};
// `libtorch`: the process' mappings of the image `where` was found in;
// nullopt when the tls_index is not mapped or unreadable.
std::optional<SequenceNumberPlace> FindSequenceNumberPlace(pid_t pid, const MappedImage& libtorch,
                                                           const ElfImage& image, const SequenceNumberTls& where);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_SEQUENCE_NUMBER_H
