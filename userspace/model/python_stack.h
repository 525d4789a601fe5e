// --python-stacks: the Python stack an op or range was entered under, as
// the python probe set decoded it (probe_sets/python). Ops share their
// stack (one object per distinct stack of a thread), so a slice holds a
// pointer, null when it has none: no Python frame on its thread, or stacks
// not asked for.
#ifndef TORCHPROBE_MODEL_PYTHON_STACK_H
#define TORCHPROBE_MODEL_PYTHON_STACK_H

#include <memory>
#include <string>
#include <vector>

namespace torchprobe {

struct PythonCode {
  std::string file;      // co_filename
  std::string function;  // co_qualname ("Linear.forward", "main.<locals>.<lambda>")
  int first_line = 0;    // co_firstlineno
};

struct PythonFrame {
  std::shared_ptr<const PythonCode> code;  // never null
  int line = -1;                           // where the frame is; -1 unknown
};

struct PythonStack {
  std::vector<PythonFrame> frames;  // outermost first; the innermost is where the op was called
  bool truncated = false;           // frames outward of the first were not read (too deep)
};

// Where a stack is: its innermost frame as "FILE(LINE): FUNCTION" ("" for none).
inline std::string InnermostLine(const PythonStack* stack) {
  if (!stack || stack->frames.empty()) return "";
  const PythonFrame& f = stack->frames.back();
  return f.code->file + "(" + std::to_string(f.line) + "): " + f.code->function;
}

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_PYTHON_STACK_H
