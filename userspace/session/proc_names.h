// Process and thread names read from /proc while the target lives. A
// process is named so that a user tells the main process, its workers and
// the ranks of a job apart in the Perfetto UI, where every one is "python3":
// "python3 train.py [rank 1] (child of 4242)".
#ifndef TORCHPROBE_SESSION_PROC_NAMES_H
#define TORCHPROBE_SESSION_PROC_NAMES_H

#include <string>
#include <unordered_map>

#include "userspace/model/op_stack_model.h"

namespace torchprobe {

// The name above, from /proc/PID/comm, /proc/PID/cmdline (NULs as spaces),
// the RANK the process was started with ("" if none) and its role ("" for a
// process the user named).
std::string DescribeProcess(const std::string& comm, const std::string& cmdline,
                            const std::string& rank, const std::string& role);

class ProcNames : public NameSource {
 public:
  // What /proc says now; once a process or thread is gone, what it said
  // last (a flight recorder's dump of a dead process still names it).
  ProcessInfo Process(uint32_t pid) override;
  std::string Thread(uint32_t pid, uint32_t tid) override;
  // How torchprobe came to trace `pid`, e.g. "child of 4242".
  void SetRole(uint32_t pid, std::string role) { roles_[pid] = std::move(role); }

 private:
  std::unordered_map<uint32_t, std::string> roles_;
  std::unordered_map<uint32_t, ProcessInfo> processes_;  // the last answer read from /proc
  std::unordered_map<uint64_t, std::string> threads_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_PROC_NAMES_H
