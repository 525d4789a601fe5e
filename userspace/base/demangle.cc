#include "userspace/base/demangle.h"

#include <cxxabi.h>

#include <cstdlib>

namespace torchprobe {

std::string DemangleSymbol(const std::string& mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  return name;
}

}  // namespace torchprobe
