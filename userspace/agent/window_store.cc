#include "userspace/agent/window_store.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "userspace/export/atomic_file.h"
#include "userspace/export/json_text.h"
#include "userspace/report/json_value.h"

namespace torchprobe {
namespace {

bool MakeDir(const std::string& path, std::string* error) {
  if (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return true;
  *error = "cannot create " + path + ": " + std::strerror(errno);
  return false;
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

uint64_t Number(const JsonValue& object, const char* key) {
  const JsonValue* value = object.Find(key);
  return value && value->kind == JsonValue::kNumber ? static_cast<uint64_t>(value->integer) : 0;
}

std::string Text(const JsonValue& object, const char* key) {
  const JsonValue* value = object.Find(key);
  return value && value->kind == JsonValue::kString ? value->string : "";
}

bool ParseEntry(const std::string& line, WindowEntry* entry) {
  JsonValue object;
  std::string error;
  if (!ParseJson(line, &object, &error) || object.kind != JsonValue::kObject) return false;
  entry->file = Text(object, "file");
  // Only names this store makes: never a path out of DIR.
  if (entry->file.empty() || entry->file.find('/') != std::string::npos || entry->file[0] == '.') return false;
  entry->bytes = Number(object, "bytes");
  entry->host = Text(object, "host");
  entry->target.pid = static_cast<uint32_t>(Number(object, "pid"));
  entry->target.rank = Text(object, "rank");
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
  entry->events = Number(object, "events");
  entry->dropped = Number(object, "dropped_events");
  entry->attach_ns = Number(object, "attach_ns");
  entry->detach_ns = Number(object, "detach_ns");
  entry->cost_ns = Number(object, "cost_ns");
  return true;
}

}  // namespace

std::string WindowStore::EntryJson(const WindowEntry& e) {
  JsonText json;
  json.Raw("{").Key("file").String(e.file).Raw(", ").Key("bytes").UInt(e.bytes);
  json.Raw(", ").Key("host").String(e.host).Raw(", ").Key("pid").UInt(e.target.pid);
  json.Raw(", ").Key("rank").String(e.target.rank).Raw(", ").Key("comm").String(e.target.comm);
  json.Raw(", ").Key("cmdline").String(e.target.cmdline).Raw(", ").Key("cgroup").String(e.target.cgroup);
  json.Raw(", ").Key("container").String(e.target.container);
  json.Raw(", ").Key("pid_ns").UInt(e.target.pid_ns).Raw(", ").Key("mnt_ns").UInt(e.target.mnt_ns);
  json.Raw(", ").Key("start_unix_ns").UInt(e.start_unix_ns);
  char duration[32];
  std::snprintf(duration, sizeof duration, "%.3f", e.duration_s);
  json.Raw(", ").Key("duration_s").Raw(duration);
  json.Raw(", ").Key("triggered").Raw(e.triggered ? "true" : "false");
  json.Raw(", ").Key("events").UInt(e.events).Raw(", ").Key("dropped_events").UInt(e.dropped);
  json.Raw(", ").Key("attach_ns").UInt(e.attach_ns).Raw(", ").Key("detach_ns").UInt(e.detach_ns);
  json.Raw(", ").Key("cost_ns").UInt(e.cost_ns).Raw("}");
  return json.str();
}

bool WindowStore::Open(const std::string& dir, uint64_t max_bytes, uint64_t max_files, std::string* error) {
  dir_ = dir;
  max_bytes_ = max_bytes;
  max_files_ = max_files;
  if (!MakeDir(dir_, error) || !MakeDir(partial_dir(), error)) return false;
  if (DIR* partial = opendir(partial_dir().c_str())) {
    while (dirent* entry = readdir(partial)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") unlink((partial_dir() + "/" + name).c_str());
    }
    closedir(partial);
  }
  std::ifstream in(index_path());
  std::string line;
  std::vector<WindowEntry> kept;
  bool dropped = false;
  while (std::getline(in, line)) {
    WindowEntry entry;
    if (line.empty()) continue;
    if (!ParseEntry(line, &entry) || !Exists(dir_ + "/" + entry.file)) {
      dropped = true;
      continue;
    }
    entry.bytes = FileSize(dir_ + "/" + entry.file);
    kept.push_back(std::move(entry));
  }
  if (dropped && !WriteIndex(kept, error)) return false;
  entries_ = std::move(kept);
  return true;
}

uint64_t WindowStore::bytes() const {
  uint64_t total = 0;
  for (const WindowEntry& entry : entries_) total += entry.bytes;
  return total;
}

std::string WindowStore::PartialPath(const std::string& host, const TargetInfo& target, uint64_t unix_ns,
                                     std::string* name) {
  time_t seconds = static_cast<time_t>(unix_ns / 1'000'000'000ull);
  tm utc;
  gmtime_r(&seconds, &utc);
  char when[48];
  std::snprintf(when, sizeof when, "%04d%02d%02dT%02d%02d%02d.%03uZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<unsigned>(unix_ns / 1'000'000ull % 1000));
  std::string rank = target.rank.empty() ? "" : "-rank" + target.rank;
  *name = host + "-pid" + std::to_string(target.pid) + rank + "-" + when + "-w" + std::to_string(sequence_++) +
          ".pftrace";
  return partial_dir() + "/" + *name;
}

bool WindowStore::WriteIndex(const std::vector<WindowEntry>& entries, std::string* error) {
  std::unique_ptr<AtomicFile> file = AtomicFile::Open(index_path(), error);
  if (!file) return false;
  for (const WindowEntry& entry : entries) {
    std::string line = EntryJson(entry) + "\n";
    file->Write(line.data(), line.size());
  }
  return file->Commit(error);
}

void WindowStore::Rotate(std::vector<WindowEntry>* entries, std::vector<std::string>* removed) const {
  uint64_t total = 0;
  for (const WindowEntry& entry : *entries) total += entry.bytes;
  // The newest window stays even when it alone is over --max-bytes: the
  // bound is on what the agent keeps, and a window is kept whole or not at all.
  while (entries->size() > 1 && ((max_files_ && entries->size() > max_files_) || (max_bytes_ && total > max_bytes_))) {
    total -= entries->front().bytes;
    removed->push_back(entries->front().file);
    entries->erase(entries->begin());
  }
}

bool WindowStore::Commit(const std::string& partial, WindowEntry* entry, std::string* error) {
  entry->bytes = FileSize(partial);
  std::vector<WindowEntry> next = entries_;
  next.push_back(*entry);
  std::vector<std::string> removed;
  Rotate(&next, &removed);
  // Old files go first, then the index, then the new file moves in: at every
  // step each file present is listed; an entry whose file is gone (a crash
  // in between) is dropped by the next Open().
  for (const std::string& name : removed) {
    unlink((dir_ + "/" + name).c_str());
    ++files_removed_;
  }
  if (!WriteIndex(next, error)) {
    unlink(partial.c_str());
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<long>(removed.size()));
    return false;
  }
  // From here the index lists the new file; a crash before the rename leaves
  // an entry that the next Open() drops.
  std::string final_path = dir_ + "/" + entry->file;
  if (rename(partial.c_str(), final_path.c_str()) != 0) {
    *error = "cannot move " + partial + " to " + final_path + ": " + std::strerror(errno);
    unlink(partial.c_str());
    next.pop_back();
    std::string ignored;
    WriteIndex(next, &ignored);
    entries_ = std::move(next);
    return false;
  }
  entries_ = std::move(next);
  return true;
}

}  // namespace torchprobe
