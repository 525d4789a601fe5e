// /proc-backed names; see the header.
#include "userspace/session/proc_names.h"

#include <cstdlib>
#include <vector>

#include "userspace/base/proc_maps.h"

namespace torchprobe {
namespace {

constexpr size_t kMaxScript = 48;

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> words;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) words.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

// What the program runs: "train.py" for "python3 -u /x/train.py --lr 1",
// "-m torch.distributed.run" for a module.
std::string Script(const std::string& cmdline) {
  std::vector<std::string> words = Words(cmdline);
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string& w = words[i];
    if ((w == "-m" || w == "-c") && i + 1 < words.size())
      return w == "-m" ? "-m " + words[i + 1] : "-c";
    if (w.empty() || w[0] == '-') continue;
    std::string base = w.substr(w.rfind('/') + 1);
    return base.size() > kMaxScript ? base.substr(0, kMaxScript) + "..." : base;
  }
  return "";
}

}  // namespace

std::string DescribeProcess(const std::string& comm, const std::string& cmdline,
                            const std::string& rank, const std::string& role) {
  std::string name = comm;
  std::string script = Script(cmdline);
  if (!script.empty()) name += (name.empty() ? "" : " ") + script;
  if (!rank.empty()) name += " [rank " + rank + "]";
  if (!role.empty()) name += " (" + role + ")";
  return name;
}

ProcessInfo ProcNames::Process(uint32_t pid) {
  ProcessInfo info;
  info.pid = pid;
  info.cmdline = ReadProcessCmdline(pid);
  std::string comm = ReadProcessComm(pid);
  auto known = processes_.find(pid);
  if (comm.empty() && known != processes_.end()) return known->second;  // gone
  auto role = roles_.find(pid);
  std::string rank = ReadProcessEnv(pid, "RANK");
  char* end = nullptr;
  long long value = rank.empty() ? -1 : std::strtoll(rank.c_str(), &end, 10);
  if (!rank.empty() && *end == '\0' && value >= 0) info.rank = value;
  info.name = DescribeProcess(comm, info.cmdline, rank,
                              role == roles_.end() ? "" : role->second);
  if (info.name.empty()) info.name = "process " + std::to_string(pid);
  if (!comm.empty()) processes_[pid] = info;
  return info;
}

std::string ProcNames::Thread(uint32_t pid, uint32_t tid) {
  std::string name = ReadThreadComm(pid, tid);
  uint64_t key = (uint64_t{pid} << 32) | tid;
  if (!name.empty()) {
    threads_[key] = name;
    return name;
  }
  auto known = threads_.find(key);
  return known == threads_.end() ? "" : known->second;
}

}  // namespace torchprobe
