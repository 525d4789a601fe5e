#include "userspace/agent/target_scan.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "userspace/discover/proc_maps.h"

namespace torchprobe {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Fields of /proc/PID/stat after the comm's closing parenthesis (comm may
// hold spaces and parentheses itself): index 0 is field 3, `state`.
std::vector<std::string> StatFields(uint32_t pid) {
  std::string text = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close = text.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos) return fields;
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  while (rest >> field) fields.push_back(field);
  return fields;
}

uint64_t NamespaceInode(uint32_t pid, const char* ns) {
  struct stat st;
  std::string path = "/proc/" + std::to_string(pid) + "/ns/" + ns;
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// "0::/path" (cgroup v2) wins; on a v1-only host the first hierarchy's path.
std::string ReadCgroup(uint32_t pid) {
  std::istringstream lines(ReadSmallFile("/proc/" + std::to_string(pid) + "/cgroup"));
  std::string line, first;
  while (std::getline(lines, line)) {
    size_t colon = line.find(':', line.find(':') + 1);
    if (colon == std::string::npos) continue;
    if (line.rfind("0::", 0) == 0) return line.substr(colon + 1);
    if (first.empty()) first = line.substr(colon + 1);
  }
  return first;
}

bool MapsTorch(uint32_t pid) {
  StatusOr<std::vector<MapEntry>> maps = ReadMaps(pid);
  if (!maps.ok()) return false;
  MappedImage image;
  return FindImageInMaps(*maps, pid, "libtorch_cpu.so", &image);
}

bool Passes(const TargetFilter& filter, const TargetInfo& info) {
  if (!filter.pids.empty() && std::find(filter.pids.begin(), filter.pids.end(), info.pid) == filter.pids.end())
    return false;
  if (filter.comm && !std::regex_search(info.comm, *filter.comm)) return false;
  if (filter.cgroup && !std::regex_search(info.cgroup, *filter.cgroup)) return false;
  if (filter.cmdline && !std::regex_search(info.cmdline, *filter.cmdline)) return false;
  return true;
}

}  // namespace

uint64_t ProcessCpuNs(uint32_t pid) {
  std::vector<std::string> fields = StatFields(pid);
  if (fields.size() < 13) return 0;  // utime, stime are fields 14, 15
  uint64_t ticks = std::strtoull(fields[11].c_str(), nullptr, 10) + std::strtoull(fields[12].c_str(), nullptr, 10);
  static const long hz = sysconf(_SC_CLK_TCK);
  return ticks * (1'000'000'000ull / static_cast<uint64_t>(hz > 0 ? hz : 100));
}

uint64_t ProcessStartTicks(uint32_t pid) {
  std::vector<std::string> fields = StatFields(pid);
  return fields.size() < 20 ? 0 : std::strtoull(fields[19].c_str(), nullptr, 10);  // field 22
}

std::string ContainerIdFromCgroup(const std::string& cgroup) {
  size_t run = 0;
  for (size_t i = 0; i <= cgroup.size(); ++i) {
    bool hex = i < cgroup.size() && std::isxdigit(static_cast<unsigned char>(cgroup[i])) &&
               !std::isupper(static_cast<unsigned char>(cgroup[i]));
    if (hex) {
      ++run;
      continue;
    }
    if (run == 64) return cgroup.substr(i - 64, 64);
    run = 0;
  }
  return "";
}

bool ReadTargetInfo(uint32_t pid, TargetInfo* info) {
  info->pid = pid;
  info->start_ticks = ProcessStartTicks(pid);
  info->comm = ReadProcessComm(pid);
  if (info->start_ticks == 0 || info->comm.empty()) return false;
  info->cmdline = ReadProcessCmdline(pid);
  info->rank = ReadProcessEnv(pid, "RANK");
  info->cgroup = ReadCgroup(pid);
  info->container = ContainerIdFromCgroup(info->cgroup);
  info->pid_ns = NamespaceInode(pid, "pid");
  info->mnt_ns = NamespaceInode(pid, "mnt");
  return true;
}

std::vector<TargetInfo> ScanTargets(const TargetFilter& filter) {
  std::vector<TargetInfo> found;
  DIR* dir = opendir("/proc");
  if (!dir) return found;
  uint32_t self = static_cast<uint32_t>(getpid());
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    unsigned long pid = std::strtoul(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || pid == self) continue;
    if (!filter.pids.empty() &&
        std::find(filter.pids.begin(), filter.pids.end(), pid) == filter.pids.end())
      continue;
    TargetInfo info;
    if (!MapsTorch(static_cast<uint32_t>(pid)) || !ReadTargetInfo(static_cast<uint32_t>(pid), &info)) continue;
    if (Passes(filter, info)) found.push_back(std::move(info));
  }
  closedir(dir);
  std::sort(found.begin(), found.end(), [](const TargetInfo& a, const TargetInfo& b) { return a.pid < b.pid; });
  return found;
}

}  // namespace torchprobe
