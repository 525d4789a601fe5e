// This machine's name, as traces, dumps and the agent's windows are named
// by it: gethostname, "localhost" when it has none.
#ifndef TORCHPROBE_BASE_HOST_NAME_H
#define TORCHPROBE_BASE_HOST_NAME_H

#include <unistd.h>

#include <string>

namespace torchprobe {

inline std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name[0] ? name : "localhost";
}

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_HOST_NAME_H
