#include "userspace/probe_sets/ops/probe_cost_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "userspace/base/atomic_file.h"

namespace torchprobe {
namespace {

constexpr const char* kFile = "/probe-cost-v1.txt";

std::string BootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

}  // namespace

std::string ProbeCostKey(const ProbeCostRoutes& routes) {
  utsname names;
  struct stat exe;
  std::string boot = BootId();
  if (boot.empty() || uname(&names) != 0 || stat("/proc/self/exe", &exe) != 0) return "";
  std::ostringstream key;
  key << boot << ' ' << names.release << ' ' << exe.st_dev << ':' << exe.st_ino << ':' << exe.st_size << ':'
      << exe.st_mtim.tv_sec << '.' << exe.st_mtim.tv_nsec << ' ' << routes.uretprobe << routes.ret
      << routes.use_uprobe_multi;
  // One word per field: no space inside one (a kernel release has none).
  return key.str();
}

std::optional<ProbeCost> LoadProbeCost(const std::string& folder, const std::string& key, uint64_t* age_s) {
  if (folder.empty() || key.empty()) return std::nullopt;
  // Only a regular file of ours, read without waiting on anything else.
  int fd = open((folder + kFile).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  char text[1024] = {};
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_size < 1024)
    n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return std::nullopt;
  std::string line(text, static_cast<size_t>(n));
  size_t bar = line.find('|');
  if (bar == std::string::npos || line.substr(0, bar) != key) return std::nullopt;
  std::istringstream values(line.substr(bar + 1));
  uint64_t measured_at = 0;
  ProbeCost cost;
  if (!(values >> measured_at >> cost.uretprobe_ns >> cost.ret_ns >> cost.took_ns)) return std::nullopt;
  uint64_t now = static_cast<uint64_t>(std::time(nullptr));
  if (measured_at > now || now - measured_at > kProbeCostMaxAgeS) return std::nullopt;
  if (cost.uretprobe_ns == 0 && cost.ret_ns == 0) return std::nullopt;
  *age_s = now - measured_at;
  return cost;
}

void StoreProbeCost(const std::string& folder, const std::string& key, const ProbeCost& cost) {
  if (folder.empty() || key.empty()) return;
  std::string error;
  std::unique_ptr<AtomicFile> file = AtomicFile::Open(folder + kFile, &error);
  if (!file) return;
  std::string line = key + "|" + std::to_string(static_cast<uint64_t>(std::time(nullptr))) + " " +
                     std::to_string(cost.uretprobe_ns) + " " + std::to_string(cost.ret_ns) + " " +
                     std::to_string(cost.took_ns) + "\n";
  if (file->Write(line.data(), line.size())) file->Commit(&error);
}

}  // namespace torchprobe
