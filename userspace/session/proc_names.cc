// /proc-backed names; see the header.
#include "userspace/session/proc_names.h"

#include "userspace/discover/proc_maps.h"

namespace torchprobe {

ProcessInfo ProcNames::Process(uint32_t pid) {
  ProcessInfo info;
  info.pid = pid;
  info.name = ReadProcessComm(pid);
  info.cmdline = ReadProcessCmdline(pid);
  if (info.name.empty()) info.name = "process " + std::to_string(pid);
  return info;
}

std::string ProcNames::Thread(uint32_t pid, uint32_t tid) { return ReadThreadComm(pid, tid); }

}  // namespace torchprobe
