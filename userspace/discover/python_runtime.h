// --python-stacks: the CPython a process runs and where it keeps what a
// stack walk reads. The interpreter is the mapped libpython3.X or the
// python3.X executable (Debian links libpython into it); its version is its
// Py_Version; its layout comes from the _Py_DebugOffsets that CPython 3.13
// publishes at the start of _PyRuntime, or, for 3.11, from the table here
// (measured with offsetof against Debian's 3.11 headers, Py_BUILD_CORE).
// Other versions are refused with one line: 3.12 has no debug offsets and
// no interpreter here to measure a table against; 3.14 changed the debug
// offsets' struct and tags its frames' code pointers.
#ifndef TORCHPROBE_DISCOVER_PYTHON_RUNTIME_H
#define TORCHPROBE_DISCOVER_PYTHON_RUNTIME_H

#include <cstdint>
#include <string>
#include <string_view>

#include "bpf/events.h"
#include "userspace/base/status.h"

namespace torchprobe {

// What userspace reads of a code object and its strings (offsets in bytes).
struct PythonObjectLayout {
  uint32_t ob_type = 8;
  uint32_t code_filename = 0, code_qualname = 0, code_linetable = 0, code_firstlineno = 0;
  uint32_t unicode_state = 0, unicode_length = 0;
  uint32_t ascii_size = 0;    // sizeof(PyASCIIObject): a compact ASCII string's bytes follow
  uint32_t compact_size = 0;  // sizeof(PyCompactUnicodeObject): a compact non-ASCII string's
  uint32_t bytes_size = 16, bytes_data = 32;  // PyBytesObject: ob_size, ob_sval
};

struct PythonRuntime {
  int major = 0, minor = 0, micro = 0;
  std::string image;       // the interpreter's file, as the process sees it
  tp_py_layout layout{};   // for the BPF walk (interp_head already placed in the process)
  PythonObjectLayout objects;
  uint64_t code_type = 0;   // &PyCode_Type in the process: what a code object's ob_type is
  uint64_t bytes_type = 0;  // &PyBytes_Type: a line table's
  // --sched: where its GIL lies in the process (struct _gil_runtime_state:
  // the futex words of its cond and mutexes); 0 when not found, and why.
  // 3.11 keeps it in _PyRuntime; 3.13 points to it from the interpreter
  // (read from the process: its interpreter must be up).
  uint64_t gil_begin = 0, gil_end = 0;
  std::string gil_missing;
};

// The CPython of process `pid`; an error (one line) when it runs none, or
// one whose layout torchprobe does not know (it says which version).
StatusOr<PythonRuntime> FindPythonRuntime(uint32_t pid);

// The layout of a 3.13 interpreter from the _Py_DebugOffsets bytes at the
// start of its _PyRuntime (`bytes`); an error when they are not 3.13's.
Status LayoutFromDebugOffsets(std::string_view bytes, PythonRuntime* runtime);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_PYTHON_RUNTIME_H
