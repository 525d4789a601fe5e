// The agent's keepers; see the header.
#include "userspace/agent/keeper_reaper.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "userspace/base/clock.h"
#include "userspace/base/proc_maps.h"

namespace torchprobe {
namespace {

constexpr char kKeeperName[] = "torchprobe-keep";  // probe_keeper.cc's PR_SET_NAME

// This process' children: /proc/self/task/PID/children (the main thread's,
// which orphans are given to), else a walk of /proc (kernels without
// CONFIG_PROC_CHILDREN).
std::vector<uint32_t> Children() {
  uint32_t self = static_cast<uint32_t>(getpid());
  std::vector<uint32_t> children;
  std::ifstream list("/proc/self/task/" + std::to_string(self) + "/children");
  if (list) {
    for (uint32_t pid; list >> pid;) children.push_back(pid);
    return children;
  }
  for (uint32_t pid : ListDescendants(self))
    if (ReadParentPid(pid) == self) children.push_back(pid);
  return children;
}

// The `--pid P` of a keeper's command line (record's, as the window child
// ran it); 0 if none.
uint32_t TargetOf(pid_t keeper) {
  std::string cmdline = " " + ReadProcessCmdline(static_cast<uint32_t>(keeper)) + " ";
  size_t at = cmdline.find(" --pid ");
  return at == std::string::npos ? 0 : static_cast<uint32_t>(std::strtoul(cmdline.c_str() + at + 7, nullptr, 10));
}

}  // namespace

bool KeeperReaper::BecomeSubreaper(std::string* error) {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) == 0) return true;
  *error = std::string("cannot become the windows' subreaper: ") + std::strerror(errno);
  return false;
}

size_t KeeperReaper::Adopt() {
  size_t taken = 0;
  // A running window's keeper is its record's child, not ours yet.
  for (uint32_t pid : Children()) {
    if (ReadProcessComm(pid) != kKeeperName) continue;
    auto [it, inserted] = keepers_.try_emplace(static_cast<pid_t>(pid));
    if (!inserted) continue;
    it->second.target = TargetOf(it->first);
    kill(it->first, SIGUSR2);
    ++taken;
  }
  return taken;
}

bool KeeperReaper::Reaped(pid_t pid) { return keepers_.erase(pid) > 0; }

bool KeeperReaper::Removing(uint32_t target, pid_t* keeper, bool* first_ask) {
  for (auto& [pid, kept] : keepers_) {
    if (kept.target != target) continue;
    *keeper = pid;
    *first_ask = !kept.asked;
    kept.asked = true;
    return true;
  }
  return false;
}

size_t KeeperReaper::Finish(int timeout_s) {
  Adopt();
  for (const auto& [pid, kept] : keepers_) kill(pid, SIGUSR1);
  uint64_t deadline = NowNs() + static_cast<uint64_t>(timeout_s) * 1'000'000'000ull;
  while (!keepers_.empty() && NowNs() < deadline) {
    for (auto it = keepers_.begin(); it != keepers_.end();) {
      pid_t pid = waitpid(it->first, nullptr, WNOHANG);
      if (pid == it->first || (pid < 0 && errno == ECHILD)) it = keepers_.erase(it);
      else ++it;
    }
    if (!keepers_.empty()) usleep(50'000);
  }
  return keepers_.size();
}

}  // namespace torchprobe
