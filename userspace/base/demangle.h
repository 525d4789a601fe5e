// C++ symbol names as people read them (abi::__cxa_demangle).
#ifndef TORCHPROBE_BASE_DEMANGLE_H
#define TORCHPROBE_BASE_DEMANGLE_H

#include <string>

namespace torchprobe {

// `mangled` demangled, or itself when it is not a C++ name.
std::string DemangleSymbol(const std::string& mangled);

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_DEMANGLE_H
