#include "userspace/agent/window_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "userspace/agent/window_name.h"
#include "userspace/base/atomic_file.h"
#include "userspace/export/json_text.h"
#include "userspace/report/json_value.h"

namespace torchprobe {
namespace {

constexpr const char* kPartial = ".partial";
constexpr const char* kIndex = "index.jsonl";

std::string Errno() { return std::strerror(errno); }

// A regular file of ours at `name` in `dir_fd`, not followed if a symlink.
bool RegularOurs(int dir_fd, const char* name, struct stat* st) {
  return fstatat(dir_fd, name, st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st->st_mode) && st->st_uid == geteuid();
}

// The whole of a file opened as `fd` (closed here).
std::string ReadAll(int fd) {
  std::string text;
  char buffer[65536];
  for (;;) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

uint64_t Number(const JsonValue& object, const char* key) {
  const JsonValue* value = object.Find(key);
  return value && value->kind == JsonValue::kNumber ? static_cast<uint64_t>(value->integer) : 0;
}

std::string Text(const JsonValue& object, const char* key) {
  const JsonValue* value = object.Find(key);
  return value && value->kind == JsonValue::kString ? value->string : "";
}

// Keeps of entry->companions those that are regular files of ours in
// `dir_fd`, their sizes added to entry->bytes; returns the others.
std::vector<std::string> KeepPresentCompanions(int dir_fd, WindowEntry* entry) {
  std::vector<std::string> present, absent;
  for (const std::string& companion : entry->companions) {
    struct stat st;
    if (IsCompanionOf(companion, entry->file) && RegularOurs(dir_fd, companion.c_str(), &st)) {
      entry->bytes += static_cast<uint64_t>(st.st_size);
      present.push_back(companion);
    } else {
      absent.push_back(companion);
    }
  }
  entry->companions = std::move(present);
  return absent;
}

bool ParseEntry(const std::string& line, WindowEntry* entry) {
  JsonValue object;
  std::string error;
  if (!ParseJson(line, &object, &error) || object.kind != JsonValue::kObject) return false;
  entry->file = Text(object, "file");
  // Only names this store makes: never a path out of DIR, nor another
  // program's file (window_name.h).
  if (!ParseWindowName(entry->file)) return false;
  if (const JsonValue* companions = object.Find("companions"); companions && companions->kind == JsonValue::kArray)
    for (const JsonValue& name : companions->items)
      if (name.kind == JsonValue::kString && IsCompanionOf(name.string, entry->file))
        entry->companions.push_back(name.string);
  entry->bytes = Number(object, "bytes");
  entry->host = Text(object, "host");
  entry->target.pid = static_cast<uint32_t>(Number(object, "pid"));
  entry->target.rank = Text(object, "rank");
  entry->target.job = Text(object, "job");
  entry->target.comm = Text(object, "comm");
  entry->target.cmdline = Text(object, "cmdline");
  entry->target.cgroup = Text(object, "cgroup");
  entry->target.container = Text(object, "container");
  entry->target.pid_ns = Number(object, "pid_ns");
  entry->target.mnt_ns = Number(object, "mnt_ns");
  entry->start_unix_ns = Number(object, "start_unix_ns");
  const JsonValue* duration = object.Find("duration_s");
  entry->duration_s = duration ? duration->number : 0;
  const JsonValue* triggered = object.Find("triggered");
  entry->triggered = triggered && triggered->boolean;
  entry->dump = Text(object, "dump");
  entry->events = Number(object, "events");
  entry->dropped = Number(object, "dropped_events");
  entry->attach_ns = Number(object, "attach_ns");
  entry->detach_ns = Number(object, "detach_ns");
  entry->cost_ns = Number(object, "cost_ns");
  entry->steps = Number(object, "steps");
  entry->step_p50_ns = Number(object, "step_p50_ns");
  entry->step_max_ns = Number(object, "step_max_ns");
  if (const JsonValue* growing = object.Find("growing"); growing && growing->kind == JsonValue::kArray)
    for (const JsonValue& leak : growing->items) {
      if (leak.kind != JsonValue::kObject) continue;
      entry->growing.push_back(GrowingLeak{Text(leak, "op"), Text(leak, "line"), Number(leak, "windows"),
                                           Number(leak, "bytes"), Number(leak, "last_bytes")});
    }
  return true;
}

}  // namespace

std::string WindowStore::EntryJson(const WindowEntry& e) {
  JsonText json;
  json.Raw("{").Key("file").String(e.file);
  if (!e.companions.empty()) {
    json.Raw(", ").Key("companions").Raw("[");
    for (size_t i = 0; i < e.companions.size(); ++i) json.Raw(i ? ", " : "").String(e.companions[i]);
    json.Raw("]");
  }
  json.Raw(", ").Key("bytes").UInt(e.bytes);
  json.Raw(", ").Key("host").String(e.host).Raw(", ").Key("pid").UInt(e.target.pid);
  json.Raw(", ").Key("rank").String(e.target.rank).Raw(", ").Key("job").String(e.target.job);
  json.Raw(", ").Key("comm").String(e.target.comm);
  json.Raw(", ").Key("cmdline").String(e.target.cmdline).Raw(", ").Key("cgroup").String(e.target.cgroup);
  json.Raw(", ").Key("container").String(e.target.container);
  json.Raw(", ").Key("pid_ns").UInt(e.target.pid_ns).Raw(", ").Key("mnt_ns").UInt(e.target.mnt_ns);
  json.Raw(", ").Key("start_unix_ns").UInt(e.start_unix_ns);
  char duration[32];
  std::snprintf(duration, sizeof duration, "%.3f", e.duration_s);
  json.Raw(", ").Key("duration_s").Raw(duration);
  json.Raw(", ").Key("triggered").Raw(e.triggered ? "true" : "false");
  if (!e.dump.empty()) json.Raw(", ").Key("dump").String(e.dump);
  json.Raw(", ").Key("events").UInt(e.events).Raw(", ").Key("dropped_events").UInt(e.dropped);
  json.Raw(", ").Key("attach_ns").UInt(e.attach_ns).Raw(", ").Key("detach_ns").UInt(e.detach_ns);
  json.Raw(", ").Key("cost_ns").UInt(e.cost_ns);
  json.Raw(", ").Key("steps").UInt(e.steps).Raw(", ").Key("step_p50_ns").UInt(e.step_p50_ns);
  json.Raw(", ").Key("step_max_ns").UInt(e.step_max_ns);
  if (!e.growing.empty()) {
    json.Raw(", ").Key("growing").Raw("[");
    for (size_t i = 0; i < e.growing.size(); ++i) {
      const GrowingLeak& leak = e.growing[i];
      json.Raw(i ? ", {" : "{").Key("op").String(leak.op);
      if (!leak.line.empty()) json.Raw(", ").Key("line").String(leak.line);
      json.Raw(", ").Key("windows").UInt(leak.windows).Raw(", ").Key("bytes").UInt(leak.bytes);
      json.Raw(", ").Key("last_bytes").UInt(leak.last_bytes).Raw("}");
    }
    json.Raw("]");
  }
  json.Raw("}");
  return json.str();
}

WindowStore::~WindowStore() {
  if (partial_fd_ >= 0) close(partial_fd_);
  if (dir_fd_ >= 0) close(dir_fd_);
}

bool WindowStore::Open(const std::string& dir, uint64_t max_bytes, uint64_t max_files, std::string* error,
                       std::string* note) {
  dir_ = dir;
  max_bytes_ = max_bytes;
  max_files_ = max_files;
  if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    *error = "cannot create " + dir_ + ": " + Errno();
    return false;
  }
  dir_fd_ = open(dir_.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC);
  if (dir_fd_ < 0) {
    *error = "cannot open " + dir_ + ": " + Errno();
    return false;
  }
  std::string partial = dir_ + "/" + kPartial;
  if (mkdirat(dir_fd_, kPartial, 0700) != 0 && errno != EEXIST) {
    *error = "cannot create " + partial + ": " + Errno();
    return false;
  }
  partial_fd_ = openat(dir_fd_, kPartial, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (partial_fd_ < 0 || fstat(partial_fd_, &st) != 0) {
    *error = partial + " is not a folder of this agent's (" + Errno() + "): remove it";
    return false;
  }
  if (st.st_uid != geteuid()) {
    *error = partial + " is owned by uid " + std::to_string(st.st_uid) + ", not by this agent: remove it";
    return false;
  }
  if ((st.st_mode & 07777) != 0700) fchmod(partial_fd_, 0700);  // an older agent's 0755
  // Empty it: every name in it is ours (no one else can write there), and
  // unlinkat removes a name, never what a symlink points at.
  if (DIR* listing = fdopendir(dup(partial_fd_))) {
    while (dirent* entry = readdir(listing))
      if (std::strcmp(entry->d_name, ".") && std::strcmp(entry->d_name, "..")) unlinkat(partial_fd_, entry->d_name, 0);
    closedir(listing);
  }

  std::vector<WindowEntry> kept;
  bool dropped = false;
  int index = openat(dir_fd_, kIndex, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (index >= 0 && (fstat(index, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())) {
    close(index);
    index = -1;
    dropped = true;
    if (note) *note = dir_ + "/" + kIndex + " is not a regular file of this agent's: not read, replaced";
  } else if (index < 0 && errno != ENOENT) {  // ELOOP: a symlink
    dropped = true;
    if (note) *note = dir_ + "/" + kIndex + " is not a regular file of this agent's (" + Errno() + "): replaced";
  }
  size_t untrusted = 0;
  if (index >= 0) {
    std::istringstream lines(ReadAll(index));
    std::string line;
    while (std::getline(lines, line)) {
      WindowEntry entry;
      if (line.empty()) continue;
      int64_t size = -1;
      if (!ParseEntry(line, &entry) || (size = OursInDir(entry.file)) < 0) {
        dropped = true;
        untrusted += !entry.file.empty();
        continue;
      }
      entry.bytes = static_cast<uint64_t>(size);
      // A companion whose file is gone (a crash between the renames) is
      // left out of its window; the window stays.
      if (!KeepPresentCompanions(dir_fd_, &entry).empty()) dropped = true;
      kept.push_back(std::move(entry));
    }
  }
  if (untrusted && note && note->empty())
    *note = std::to_string(untrusted) + " index lines dropped: no window file of this agent's by that name";
  if (dropped && !WriteIndex(kept, error)) return false;
  entries_ = std::move(kept);
  return true;
}

int64_t WindowStore::OursInDir(const std::string& name) const {
  struct stat st;
  return ParseWindowName(name) && RegularOurs(dir_fd_, name.c_str(), &st) ? st.st_size : -1;
}

uint64_t WindowStore::bytes() const {
  uint64_t total = 0;
  for (const WindowEntry& entry : entries_) total += entry.bytes;
  return total;
}

std::string WindowStore::NewName(const std::string& host, const TargetInfo& target, uint64_t unix_ns) {
  return MakeWindowName(host, target.pid, target.rank, unix_ns, sequence_++);
}

std::string WindowStore::PartialPath(const std::string& name) const {
  return "/proc/self/fd/" + std::to_string(partial_fd_) + "/" + name;
}

void WindowStore::RemovePartial(const std::string& name) { unlinkat(partial_fd_, name.c_str(), 0); }

void WindowStore::RemoveFromDir(const WindowEntry& entry) {
  // Companions first: an entry whose .pftrace is gone is dropped whole by
  // Open(), one whose companion is gone keeps the rest.
  for (const std::string& companion : entry.companions) {
    struct stat st;
    if (IsCompanionOf(companion, entry.file) && RegularOurs(dir_fd_, companion.c_str(), &st))
      unlinkat(dir_fd_, companion.c_str(), 0);
  }
  if (OursInDir(entry.file) >= 0) unlinkat(dir_fd_, entry.file.c_str(), 0);
}

bool WindowStore::WriteIndex(const std::vector<WindowEntry>& entries, std::string* error) {
  std::unique_ptr<AtomicFile> file = AtomicFile::OpenAt(dir_fd_, kIndex, dir_ + "/" + kIndex, error);
  if (!file) return false;
  for (const WindowEntry& entry : entries) {
    std::string line = EntryJson(entry) + "\n";
    file->Write(line.data(), line.size());
  }
  return file->Commit(error);
}

void WindowStore::Rotate(std::vector<WindowEntry>* entries, std::vector<WindowEntry>* removed) const {
  uint64_t total = 0;
  for (const WindowEntry& entry : *entries) total += entry.bytes;
  // The newest window stays even when it alone is over --max-bytes: the
  // bound is on what the agent keeps, and a window is kept whole or not at all.
  while (entries->size() > 1 && ((max_files_ && entries->size() > max_files_) || (max_bytes_ && total > max_bytes_))) {
    total -= entries->front().bytes;
    removed->push_back(entries->front());
    entries->erase(entries->begin());
  }
}

bool WindowStore::Commit(WindowEntry* entry, std::string* error, size_t* missing) {
  struct stat st;
  if (!RegularOurs(partial_fd_, entry->file.c_str(), &st)) {
    *error = "window " + entry->file + " is missing from " + dir_ + "/" + kPartial;
    RemovePartial(entry->file);
    for (const std::string& companion : entry->companions) RemovePartial(companion);
    return false;
  }
  entry->bytes = static_cast<uint64_t>(st.st_size);
  for (const std::string& absent : KeepPresentCompanions(partial_fd_, entry)) {
    if (missing) ++*missing;
    RemovePartial(absent);
  }
  std::vector<WindowEntry> next = entries_;
  next.push_back(*entry);
  std::vector<WindowEntry> removed;
  Rotate(&next, &removed);
  // Old files go first, then the index, then the new files move in: at every
  // step each file present is listed; an entry whose file is gone (a crash
  // in between) is dropped by the next Open(). A file is removed only while
  // it is still a window file of ours (checked again just before).
  for (const WindowEntry& old : removed) {
    RemoveFromDir(old);
    ++files_removed_;
  }
  auto remove_new = [&] {
    RemovePartial(entry->file);
    for (const std::string& companion : entry->companions) RemovePartial(companion);
  };
  if (!WriteIndex(next, error)) {
    remove_new();
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<long>(removed.size()));
    return false;
  }
  // From here the index lists the new files; a crash before the renames
  // leaves an entry (or a companion) that the next Open() drops.
  if (renameat(partial_fd_, entry->file.c_str(), dir_fd_, entry->file.c_str()) != 0) {
    *error = "cannot move " + entry->file + " into " + dir_ + ": " + Errno();
    remove_new();
    next.pop_back();
    std::string ignored;
    WriteIndex(next, &ignored);
    entries_ = std::move(next);
    return false;
  }
  for (const std::string& companion : entry->companions)
    if (renameat(partial_fd_, companion.c_str(), dir_fd_, companion.c_str()) != 0) RemovePartial(companion);
  entries_ = std::move(next);
  return true;
}

}  // namespace torchprobe
