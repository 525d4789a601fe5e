// The code objects a process' Python stacks name, read from its memory
// (read only, process_vm_readv) the first time a stack names each: file,
// qualified name, first line and line table, cached by address. A code
// object lives as long as a function that runs it, so an address seen in a
// stack read moments ago names the same code (a function made and dropped
// in between could reuse it: the cache keeps the first).
#ifndef TORCHPROBE_PROBE_SETS_PYTHON_CODE_OBJECTS_H
#define TORCHPROBE_PROBE_SETS_PYTHON_CODE_OBJECTS_H

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "userspace/discover/python_runtime.h"
#include "userspace/model/python_stack.h"

namespace torchprobe {

class CodeObjects {
 public:
  CodeObjects(uint32_t pid, const PythonRuntime& runtime) : pid_(pid), runtime_(runtime) {}
  // The frame of the code object at `address` at code unit `lasti`: false
  // when that is no code object or cannot be read.
  bool Frame(uint64_t address, int32_t lasti, PythonFrame* frame);

 private:
  struct Entry {
    std::shared_ptr<const PythonCode> code;  // null: not a code object
    std::string linetable;
  };
  Entry Read(uint64_t address) const;
  bool ReadString(uint64_t address, std::string* out) const;
  bool ReadBytes(uint64_t address, std::string* out) const;

  uint32_t pid_;
  PythonRuntime runtime_;
  std::unordered_map<uint64_t, Entry> cache_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_PYTHON_CODE_OBJECTS_H
