// Code address in a process -> the function symbol there, demangled: a CUDA
// launch's host stub (what cudaLaunchKernel is given) is named after its
// __global__ function, which names the kernel. A process' mappings are read
// the first time one of its addresses is asked for (and again when an address
// is outside all of them: a library loaded since), so names of processes
// that have exited since stay known; each image is read once, and only
// from the very file mapped (device and inode), never a same-named one.
#ifndef TORCHPROBE_DISCOVER_ADDRESS_SYMBOLS_H
#define TORCHPROBE_DISCOVER_ADDRESS_SYMBOLS_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "userspace/base/proc_maps.h"
#include "userspace/discover/elf_symbols.h"

namespace torchprobe {

class AddressSymbols {
 public:
  // `data`: name data objects (an autograd node's vtable pointer -> "vtable
  // for torch::autograd::generated::AddmmBackward0") instead of functions.
  explicit AddressSymbols(bool data = false) : data_(data) {}
  // Reads `pid`'s mappings now (at attach), so that its addresses can be
  // named after it exits.
  void Remember(uint32_t pid);
  // The demangled name of the function (data object) containing `address`
  // in `pid`; "" when no mapped file has a symbol there.
  std::string Name(uint32_t pid, uint64_t address);
  // Why the first address that could not be named was not ("" while every
  // one was): what a summary says when names are missing.
  const std::string& first_failure() const { return first_failure_; }

 private:
  struct Image {
    std::unique_ptr<ElfImage> elf;         // null: could not be read
    uint64_t failed_ns = 0;                // when it could not (tried again a second later)
    std::vector<ElfSymbol> functions;      // (or data objects) by ascending vaddr
  };
  const MapEntry* FindMapping(uint32_t pid, uint64_t address);
  Image& OpenImage(uint32_t pid, const MapEntry& mapping);
  void Failed(uint32_t pid, uint64_t address, const std::string& why);

  bool data_;
  std::map<uint32_t, std::vector<MapEntry>> maps_;    // by pid
  std::map<std::pair<std::string, uint64_t>, Image> images_;  // by the file's (device, inode)
  std::map<std::pair<uint32_t, uint64_t>, std::string> names_;  // answers so far
  std::string first_failure_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_ADDRESS_SYMBOLS_H
