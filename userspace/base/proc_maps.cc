// /proc readers; see the header. Everything here reads small text files, so
// plain iostreams-free POSIX reads keep it dependency-light and fast.
#include "userspace/base/proc_maps.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "userspace/base/clock.h"

namespace torchprobe {
namespace {

std::string ProcPath(uint32_t pid, const char* leaf) {
  return "/proc/" + std::to_string(pid) + "/" + leaf;
}

// Reads a whole (pseudo) file; false with errno set on failure.
bool ReadWholeFile(const std::string& path, std::string* out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->clear();
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int saved = errno;
      close(fd);
      errno = saved;
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

std::string_view NextField(std::string_view* line) {
  size_t begin = line->find_first_not_of(' ');
  if (begin == std::string_view::npos) {
    *line = {};
    return {};
  }
  line->remove_prefix(begin);
  size_t end = line->find(' ');
  std::string_view field = line->substr(0, end);
  line->remove_prefix(end == std::string_view::npos ? line->size() : end);
  return field;
}

bool ParseHex(std::string_view text, uint64_t* value) {
  if (text.empty() || text.size() > 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int digit;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    else return false;
    v = v << 4 | static_cast<uint64_t>(digit);
  }
  *value = v;
  return true;
}

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

constexpr std::string_view kDeleted = " (deleted)";

std::string ErrnoText(int err) { return std::strerror(err); }

}  // namespace

std::vector<MapEntry> ParseMaps(std::string_view text) {
  std::vector<MapEntry> maps;
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    // "start-end perms offset dev inode   path", path may hold spaces.
    std::string_view range = NextField(&line);
    std::string_view perms = NextField(&line);
    std::string_view offset = NextField(&line);
    std::string_view dev = NextField(&line);
    std::string_view inode = NextField(&line);
    size_t dash = range.find('-');
    MapEntry entry;
    if (dash == std::string_view::npos || !ParseHex(range.substr(0, dash), &entry.start) ||
        !ParseHex(range.substr(dash + 1), &entry.end) || !ParseHex(offset, &entry.offset) ||
        inode.empty()) {
      continue;
    }
    entry.perms = perms;
    entry.dev = dev;
    entry.inode = std::strtoull(std::string(inode).c_str(), nullptr, 10);
    size_t path_begin = line.find_first_not_of(' ');
    if (path_begin != std::string_view::npos) entry.path = line.substr(path_begin);
    maps.push_back(std::move(entry));
  }
  return maps;
}

StatusOr<std::vector<MapEntry>> ReadMaps(uint32_t pid) {
  std::string text;
  std::string path = ProcPath(pid, "maps");
  if (!ReadWholeFile(path, &text)) {
    int err = errno;
    if (err == ENOENT || err == ESRCH) return Status::Error("no process with pid " + std::to_string(pid));
    if (err == EACCES || err == EPERM)
      return Status::Error("cannot read " + path + ": permission denied (torchprobe must run as root)");
    return Status::Error("cannot read " + path + ": " + ErrnoText(err));
  }
  return ParseMaps(text);
}

namespace {

// Whether `mapping` maps the file `st` describes: the same device and inode.
bool MapsFile(const struct stat& st, const MapEntry& mapping) {
  // maps prints the device as the kernel's "%02x:%02x" of major and minor.
  unsigned major_number = 0, minor_number = 0;
  return std::sscanf(mapping.dev.c_str(), "%x:%x", &major_number, &minor_number) == 2 &&
         st.st_ino == mapping.inode && major(st.st_dev) == major_number && minor(st.st_dev) == minor_number;
}

}  // namespace

bool IsMappedFile(const std::string& path, const MapEntry& mapping) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && MapsFile(st, mapping);
}

std::string ImageIdentity(const std::string& host_path) {
  struct stat st;
  if (stat(host_path.c_str(), &st) != 0) return "";
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

bool FindImageInMaps(const std::vector<MapEntry>& maps, uint32_t pid, std::string_view prefix,
                     MappedImage* image) {
  const MapEntry* first = nullptr;
  for (const MapEntry& entry : maps) {
    if (entry.path.empty() || entry.path[0] != '/') continue;  // anonymous, [heap], [vdso]...
    std::string_view path = entry.path;
    if (path.ends_with(kDeleted)) path.remove_suffix(kDeleted.size());
    if (Basename(path).starts_with(prefix)) {
      first = &entry;
      break;
    }
  }
  if (first == nullptr) return false;
  image->path = first->path;
  image->mappings.clear();
  for (const MapEntry& entry : maps)
    if (entry.path == first->path && entry.inode == first->inode) image->mappings.push_back(entry);
  if (image->path.ends_with(kDeleted)) {
    // Replaced on disk since it was loaded: only the mapping itself still
    // reaches the old inode (map_files needs CAP_SYS_ADMIN, which root has).
    image->path.resize(image->path.size() - kDeleted.size());
    char range[64];
    std::snprintf(range, sizeof(range), "%lx-%lx", static_cast<unsigned long>(first->start),
                  static_cast<unsigned long>(first->end));
    image->host_path = ProcPath(pid, "map_files/") + range;
  } else {
    // Through the target's root, so a process in a container is read from its
    // own filesystem, not a same-named file of the host.
    image->host_path = ProcPath(pid, "root") + image->path;
  }
  return true;
}

namespace {

// /proc/PID/maps prints a path relative to the reader's root. For a process
// in its own mount namespace (a container) /proc/PID/root/<path> reaches the
// file; for one merely chrooted inside ours, <path> already holds the chroot
// and the prefix would double it. The device and inode in the maps line
// decide; the mapping itself (map_files, needs CAP_SYS_ADMIN) always reaches
// it.
Status ResolveHostPath(uint32_t pid, MappedImage* image) {
  const MapEntry& mapping = image->mappings.front();
  char range[64];
  std::snprintf(range, sizeof(range), "%lx-%lx", static_cast<unsigned long>(mapping.start),
                static_cast<unsigned long>(mapping.end));
  for (const std::string& candidate :
       {image->host_path, ProcPath(pid, "map_files/") + range, image->path}) {
    if (IsMappedFile(candidate, mapping)) {
      image->host_path = candidate;
      return Status::Ok();
    }
  }
  return Status::Error("cannot open " + image->path + " as process " + std::to_string(pid) +
                       " maps it: not through /proc/" + std::to_string(pid) +
                       "/root, its mapping, nor this root");
}

}  // namespace

std::optional<uint64_t> MappedAddress(const MappedImage& image, uint64_t file_offset) {
  for (const MapEntry& m : image.mappings)
    if (file_offset >= m.offset && file_offset < m.offset + (m.end - m.start)) return m.start + (file_offset - m.offset);
  return std::nullopt;
}

std::vector<uint64_t> MappedCodeAddresses(uint32_t pid, const std::string& path, const std::vector<uint64_t>& offsets) {
  std::vector<uint64_t> addresses(offsets.size(), 0);
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return addresses;
  // One read of a process' maps serves the groups of links attached to it
  // in the same moment (a PyTorch process maps thousands of regions: each
  // read took ~9 ms here, five of them per attach). Kept half a second.
  static std::mutex lock;
  static uint32_t cached_pid = 0;
  static uint64_t cached_at = 0;
  static std::vector<MapEntry> cached;
  std::lock_guard<std::mutex> hold(lock);
  uint64_t now = NowNs();
  if (cached_pid != pid || now - cached_at > 500'000'000ull) {
    StatusOr<std::vector<MapEntry>> read = ReadMaps(pid);
    if (!read.ok()) return addresses;
    cached = std::move(*read);
    cached_pid = pid;
    cached_at = now;
  }
  // The file's identity once (stat above), each mapping's against it (a
  // PyTorch process maps hundreds of files: no stat per mapping).
  MappedImage image;
  for (const MapEntry& entry : cached)
    if (entry.perms.size() >= 3 && entry.perms[2] == 'x' && MapsFile(st, entry)) image.mappings.push_back(entry);
  for (size_t i = 0; i < offsets.size(); ++i)
    if (std::optional<uint64_t> address = MappedAddress(image, offsets[i])) addresses[i] = *address;
  return addresses;
}

StatusOr<MappedImage> FindMappedImage(uint32_t pid, std::string_view prefix) {
  StatusOr<std::vector<MapEntry>> maps = ReadMaps(pid);
  if (!maps.ok()) return maps.status();
  MappedImage image;
  if (FindImageInMaps(*maps, pid, prefix, &image)) {
    Status status = ResolveHostPath(pid, &image);
    if (!status.ok()) return status;
  } else {
    std::string comm = ReadProcessComm(pid);
    std::string process = "process " + std::to_string(pid) + (comm.empty() ? "" : " (" + comm + ")");
    // A zombie's maps are empty: it has exited, whatever it ran.
    if (ReadProcessState(pid) == 'Z')
      return Status::Error(process + " is a zombie: it has exited (its parent has not reaped it), nothing to trace");
    return Status::Error(process + " has no " + std::string(prefix) + " mapped: is it a PyTorch process?");
  }
  return image;
}

std::string ReadProcessComm(uint32_t pid) {
  std::string text;
  if (!ReadWholeFile(ProcPath(pid, "comm"), &text)) return "";
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string ReadProcessCmdline(uint32_t pid) {
  std::string text;
  if (!ReadWholeFile(ProcPath(pid, "cmdline"), &text)) return "";
  while (!text.empty() && text.back() == '\0') text.pop_back();
  std::replace(text.begin(), text.end(), '\0', ' ');
  return text;
}

std::string ReadThreadComm(uint32_t pid, uint32_t tid) {
  std::string text;
  if (!ReadWholeFile(ProcPath(pid, "task/") + std::to_string(tid) + "/comm", &text)) return "";
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::vector<uint32_t> ListThreads(uint32_t pid) {
  std::vector<uint32_t> tids;
  DIR* dir = opendir(ProcPath(pid, "task").c_str());
  if (dir == nullptr) return tids;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    unsigned long tid = std::strtoul(entry->d_name, &end, 10);
    if (end != entry->d_name && *end == '\0') tids.push_back(static_cast<uint32_t>(tid));
  }
  closedir(dir);
  std::sort(tids.begin(), tids.end());
  return tids;
}

namespace {

// The fields of /proc/PID/stat after the command name, which may itself
// hold ')' or spaces: "S 1234 ..." (state, ppid, ...); "" when gone.
std::string StatAfterComm(uint32_t pid) {
  std::string stat;
  if (!ReadWholeFile(ProcPath(pid, "stat"), &stat)) return "";
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return "";
  return stat.substr(paren + 2);
}

}  // namespace

char ReadProcessState(uint32_t pid) {
  std::string fields = StatAfterComm(pid);
  return fields.empty() ? 0 : fields[0];
}

bool IsProcessAlive(uint32_t pid) {
  // kill(pid, 0) says yes to zombies; the state letter in stat does not.
  // Nor to a process on its way out: its files, root and memory go before
  // it is a zombie, while it still reads as running (PF_EXITING in flags,
  // the 7th field after the command name).
  std::string fields = StatAfterComm(pid);
  if (fields.empty() || fields[0] == 'Z' || fields[0] == 'X') return false;
  unsigned long long flags = 0;
  constexpr unsigned long long kExiting = 0x4;  // PF_EXITING
  return !(std::sscanf(fields.c_str(), "%*c %*d %*d %*d %*d %*d %llu", &flags) == 1 && (flags & kExiting));
}

uint32_t ReadParentPid(uint32_t pid) {
  std::string fields = StatAfterComm(pid);
  if (fields.size() < 3) return 0;
  return static_cast<uint32_t>(std::strtoul(fields.c_str() + 2, nullptr, 10));
}

namespace {
// The number after "\nNAME:" in /proc/TID/status; 0 when absent or gone.
uint32_t ReadStatusNumber(uint32_t tid, std::string_view name) {
  std::string text;
  if (!ReadWholeFile(ProcPath(tid, "status"), &text)) return 0;
  std::string key = "\n" + std::string(name) + ":";
  size_t at = text.find(key);
  if (at == std::string::npos) return 0;
  return static_cast<uint32_t>(std::strtoul(text.c_str() + at + key.size(), nullptr, 10));
}
}  // namespace

uint32_t ReadThreadGroup(uint32_t tid) { return ReadStatusNumber(tid, "Tgid"); }

uint32_t ReadTracerPid(uint32_t tid) { return ReadStatusNumber(tid, "TracerPid"); }

uint32_t ReadProcessUid(uint32_t pid) { return ReadStatusNumber(pid, "Uid"); }

namespace {
// The text after "\nNAME:" in /proc/PID/task/TID/status, blanks skipped;
// "" when absent or gone.
std::string ReadTaskStatusField(uint32_t pid, uint32_t tid, std::string_view name) {
  std::string text;
  if (!ReadWholeFile(ProcPath(pid, "task/") + std::to_string(tid) + "/status", &text)) return "";
  std::string key = "\n" + std::string(name) + ":";
  size_t at = text.find(key);
  if (at == std::string::npos) return "";
  size_t begin = text.find_first_not_of(" \t", at + key.size());
  size_t end = text.find('\n', at + key.size());
  if (begin == std::string::npos || begin >= end) return "";
  return text.substr(begin, end - begin);
}
}  // namespace

bool IsThreadOf(uint32_t pid, uint32_t tid) {
  std::string tgid = ReadTaskStatusField(pid, tid, "Tgid");
  char* end = nullptr;
  unsigned long value = std::strtoul(tgid.c_str(), &end, 10);
  return !tgid.empty() && *end == '\0' && value == pid;
}

bool IsSignalPending(uint32_t pid, uint32_t tid, int signal) {
  // 16 hex digits, signal N at bit N-1; strtoull, not stoull: /proc text
  // that does not parse is "no", never an exception.
  std::string pending = ReadTaskStatusField(pid, tid, "SigPnd");
  char* end = nullptr;
  errno = 0;
  unsigned long long mask = std::strtoull(pending.c_str(), &end, 16);
  if (pending.empty() || *end != '\0' || errno != 0 || signal < 1 || signal > 64) return false;
  return (mask >> (signal - 1)) & 1;
}

std::string DescribeTracer(uint32_t tracer, const std::string& torchprobe) {
  std::string comm = ReadProcessComm(tracer);
  std::string who = "pid " + std::to_string(tracer) + (comm.empty() ? "" : " (" + comm + ")");
  struct stat ours {}, theirs {};
  bool same = stat(torchprobe.c_str(), &ours) == 0 && stat(ProcPath(tracer, "exe").c_str(), &theirs) == 0 &&
              ours.st_dev == theirs.st_dev && ours.st_ino == theirs.st_ino;
  return who + (same ? ", another torchprobe" : ", a debugger?");
}

std::vector<uint32_t> ListDescendants(uint32_t root) {
  // One pass over /proc: parent of every process, then a walk down from root.
  std::vector<std::pair<uint32_t, uint32_t>> parent_child;
  if (DIR* dir = opendir("/proc")) {
    while (dirent* entry = readdir(dir)) {
      char* end = nullptr;
      unsigned long pid = std::strtoul(entry->d_name, &end, 10);
      if (end == entry->d_name || *end != '\0') continue;
      uint32_t parent = ReadParentPid(static_cast<uint32_t>(pid));
      if (parent) parent_child.emplace_back(parent, static_cast<uint32_t>(pid));
    }
    closedir(dir);
  }
  std::vector<uint32_t> found, frontier = {root};
  while (!frontier.empty()) {
    uint32_t parent = frontier.back();
    frontier.pop_back();
    for (const auto& [p, child] : parent_child) {
      if (p != parent || !IsProcessAlive(child)) continue;
      found.push_back(child);
      frontier.push_back(child);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string ReadProcessEnv(uint32_t pid, std::string_view name) {
  std::string text;
  if (!ReadWholeFile(ProcPath(pid, "environ"), &text)) return "";
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    std::string_view entry(text.data() + start, end - start);
    if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=')
      return std::string(entry.substr(name.size() + 1));
    start = end + 1;
  }
  return "";
}

}  // namespace torchprobe
