// The line a CPython 3.11+ code object is at: its co_linetable (the
// "locations table" of CPython's Objects/locations.md) read from
// co_firstlineno to the entry that holds the instruction.
#ifndef TORCHPROBE_PROBE_SETS_PYTHON_LINE_TABLE_H
#define TORCHPROBE_PROBE_SETS_PYTHON_LINE_TABLE_H

#include <cstdint>
#include <string_view>

namespace torchprobe {

// The line of the code unit `lasti` (as _PyInterpreterFrame_LASTI counts:
// code units of two bytes from the first). co_firstlineno for lasti < 0 (a
// frame not started), as PyCode_Addr2Line; -1 where the table says the
// instruction has no line or does not reach it.
int PythonLine(std::string_view linetable, int first_line, int32_t lasti);

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_PYTHON_LINE_TABLE_H
