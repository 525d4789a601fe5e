#include "userspace/agent/target_scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <re2/re2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <utility>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "userspace/base/proc_maps.h"

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

// Up to `max` bytes of a /proc file: a process' command line and
// environment are as long as it likes.
std::string ReadBounded(const std::string& path, size_t max) {
  std::string text;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  text.resize(max);
  size_t got = 0;
  while (got < max) {
    ssize_t n = read(fd, text.data() + got, max - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(got);
  return text;
}

std::string ReadCmdline(uint32_t pid) {
  std::string text = ReadBounded("/proc/" + std::to_string(pid) + "/cmdline", kMaxCmdline);
  while (!text.empty() && text.back() == '\0') text.pop_back();
  std::replace(text.begin(), text.end(), '\0', ' ');
  return text;
}

// NAME=VALUE entries of the first 256 KiB of the environment (a process'
// own environment, as exec gave it; torchrun's workers have RANK near its
// start), each value's first kMaxRank bytes; those not set are absent.
std::map<std::string, std::string> ReadEnvironment(uint32_t pid, std::initializer_list<std::string_view> names) {
  std::map<std::string, std::string> found;
  std::string environ = ReadBounded("/proc/" + std::to_string(pid) + "/environ", 256 * 1024);
  for (size_t start = 0; start < environ.size();) {
    size_t end = environ.find('\0', start);
    if (end == std::string::npos) end = environ.size();
    std::string_view entry(environ.data() + start, end - start);
    size_t equals = entry.find('=');
    for (std::string_view name : names)
      if (equals == name.size() && entry.starts_with(name) && !found.count(std::string(name)))
        found[std::string(name)] = std::string(entry.substr(equals + 1, kMaxRank));
    start = end + 1;
  }
  return found;
}

std::string ReadRank(uint32_t pid) {
  std::map<std::string, std::string> env = ReadEnvironment(pid, {"RANK"});
  return env.count("RANK") ? env["RANK"] : "";
}

bool MappedExecutable(const MapEntry& entry) {
  return entry.perms.size() >= 3 && entry.perms[2] == 'x' && entry.inode != 0 && entry.path.starts_with("/");
}

// torchprobe's own executable, as our maps name it: (device, inode).
std::pair<std::string, uint64_t> OwnExecutable() {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  StatusOr<std::vector<MapEntry>> maps = ReadMaps(static_cast<uint32_t>(getpid()));
  if (n <= 0 || !maps.ok()) return {"", 0};
  std::string path(self, static_cast<size_t>(n));
  for (const MapEntry& entry : *maps)
    if (MappedExecutable(entry) && entry.path == path) return {entry.dev, entry.inode};
  return {"", 0};
}

}  // namespace

bool IsTorchprobeProcess(const std::vector<MapEntry>& maps) {
  static const std::pair<std::string, uint64_t> own = OwnExecutable();
  if (own.second == 0) return false;
  for (const MapEntry& entry : maps)
    if (MappedExecutable(entry) && entry.inode == own.second && entry.dev == own.first) return true;
  return false;
}

namespace {

// A target has libtorch loaded: the loader maps its code executable. A file
// that is only mapped for reading is no library loaded. The maps line alone
// decides; nothing of the file is opened or even stat'ed here (a file on a
// FUSE mount could stall the agent's one thread); record opens it later,
// and only as a regular file (discover/mapped_file.h). Only regular files
// can be mapped executable by name (a FIFO or socket cannot be mapped).
// torchprobe's own processes (this agent, its window children, keepers,
// another agent, a person's `record`) run its executable: never targets,
// whatever they map.
bool MapsTorch(uint32_t pid) {
  StatusOr<std::vector<MapEntry>> maps = ReadMaps(pid);
  if (!maps.ok() || IsTorchprobeProcess(*maps)) return false;
  constexpr std::string_view kDeleted = " (deleted)", kTorch = "libtorch_cpu.so";
  for (const MapEntry& entry : *maps) {
    if (!MappedExecutable(entry)) continue;
    std::string_view path = entry.path;
    if (path.ends_with(kDeleted)) path.remove_suffix(kDeleted.size());
    if (path.substr(path.rfind('/') + 1).starts_with(kTorch)) return true;
  }
  return false;
}

bool Search(const std::shared_ptr<const re2::RE2>& expression, const std::string& text) {
  return !expression || re2::RE2::PartialMatch(text, *expression);
}

// The filters read only what they match: comm, cgroup, command line.
bool Passes(const TargetFilter& filter, const TargetInfo& info) {
  if (!filter.pids.empty() && std::find(filter.pids.begin(), filter.pids.end(), info.pid) == filter.pids.end())
    return false;
  return Search(filter.comm, info.comm) && Search(filter.cgroup, info.cgroup) && Search(filter.cmdline, info.cmdline);
}

// What the filters see; false when the process is gone.
bool ReadFilteredInfo(uint32_t pid, TargetInfo* info) {
  info->pid = pid;
  info->start_ticks = ProcessStartTicks(pid);
  info->comm = ReadProcessComm(pid);
  if (info->start_ticks == 0 || info->comm.empty()) return false;
  info->cmdline = ReadCmdline(pid);
  info->cgroup = ReadCgroup(pid);
  return true;
}

// The rest, once it is taken.
void ReadRestOfInfo(TargetInfo* info) {
  info->rank = ReadRank(info->pid);
  info->container = ContainerIdFromCgroup(info->cgroup);
  info->pid_ns = NamespaceInode(info->pid, "pid");
  info->mnt_ns = NamespaceInode(info->pid, "mnt");
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

std::shared_ptr<const re2::RE2> CompileFilter(const std::string& expression) {
  re2::RE2::Options options;
  options.set_log_errors(false);
  auto compiled = std::make_shared<const re2::RE2>(expression, options);
  return compiled->ok() ? compiled : nullptr;
}

std::string JobOf(uint32_t pid, const std::string& variable) {
  if (!variable.empty()) {
    std::map<std::string, std::string> env = ReadEnvironment(pid, {variable});
    return env.count(variable) ? env[variable] : "";
  }
  std::map<std::string, std::string> env = ReadEnvironment(pid, {"TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT"});
  if (env.count("TORCHELASTIC_RUN_ID") && !env["TORCHELASTIC_RUN_ID"].empty()) return env["TORCHELASTIC_RUN_ID"];
  if (env.count("MASTER_ADDR")) return env["MASTER_ADDR"] + (env.count("MASTER_PORT") ? ":" + env["MASTER_PORT"] : "");
  return "";
}

bool ReadTargetInfo(uint32_t pid, TargetInfo* info) {
  if (!ReadFilteredInfo(pid, info)) return false;
  ReadRestOfInfo(info);
  return true;
}

std::vector<TargetInfo> ScanTargets(const TargetFilter& filter, const KnownTarget& known, size_t room,
                                    size_t* left_out) {
  std::vector<TargetInfo> found;
  DIR* dir = opendir("/proc");
  if (!dir) return found;
  uint32_t self = static_cast<uint32_t>(getpid());
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    unsigned long number = std::strtoul(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || number == self || number > UINT32_MAX) continue;
    auto pid = static_cast<uint32_t>(number);
    if (!filter.pids.empty() && std::find(filter.pids.begin(), filter.pids.end(), pid) == filter.pids.end())
      continue;
    if (!MapsTorch(pid)) continue;
    TargetInfo info;
    info.pid = pid;
    info.start_ticks = ProcessStartTicks(pid);
    if (known && info.start_ticks && known(pid, info.start_ticks)) {
      found.push_back(std::move(info));
      continue;
    }
    if (!ReadFilteredInfo(pid, &info) || !Passes(filter, info)) continue;
    if (room == 0) {
      if (left_out) ++*left_out;
      continue;
    }
    --room;
    ReadRestOfInfo(&info);
    found.push_back(std::move(info));
  }
  closedir(dir);
  std::sort(found.begin(), found.end(), [](const TargetInfo& a, const TargetInfo& b) { return a.pid < b.pid; });
  return found;
}

}  // namespace torchprobe
