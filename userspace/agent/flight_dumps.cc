// Finding a flight recorder's dumps; see the header.
#include "userspace/agent/flight_dumps.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "userspace/report/json_value.h"

namespace torchprobe {
namespace {

constexpr std::string_view kStallJson = ".stall.json";

uint64_t Number(const JsonValue& object, const char* key) {
  const JsonValue* value = object.Find(key);
  return value && value->kind == JsonValue::kNumber && value->integer > 0 ? static_cast<uint64_t>(value->integer) : 0;
}

}  // namespace

std::string FlightOutputName(uint32_t pid) { return "flight-" + std::to_string(pid) + ".pftrace"; }

std::string FlightDumpCompanion(const FlightDump& dump, std::string_view suffix) {
  std::string output = FlightOutputName(dump.pid);  // flight-PID.pftrace
  std::string stem = output.substr(0, output.size() - std::string_view(".pftrace").size());
  std::string_view own = std::string_view(dump.base).substr(std::min(stem.size(), dump.base.size()));  // .SUFFIX
  std::string_view extension = suffix.substr(std::min(suffix.size(), suffix.rfind('.')));             // .json
  return stem + std::string(suffix.substr(0, suffix.size() - extension.size())) + std::string(own) +
         std::string(extension);
}

std::vector<FlightDump> FinishedFlightDumps(int partial_fd, const std::string& partial_path) {
  constexpr std::string_view kPrefix = "flight-";
  std::vector<std::pair<std::string, uint32_t>> names;
  int fd = openat(partial_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* dir = fd >= 0 ? fdopendir(fd) : nullptr;
  if (!dir) {
    if (fd >= 0) close(fd);
    return {};
  }
  while (dirent* entry = readdir(dir)) {
    std::string_view name = entry->d_name;
    if (!name.starts_with(kPrefix) || !name.ends_with(kStallJson)) continue;
    // flight-PID.<dump's own suffix>.stall.json
    uint32_t pid = 0;
    const char* digits = name.data() + kPrefix.size();
    auto [after, error] = std::from_chars(digits, name.data() + name.size(), pid);
    if (error != std::errc() || after == digits || pid == 0 || *after != '.' ||
        static_cast<size_t>(after - name.data()) + 1 + kStallJson.size() >= name.size())
      continue;
    names.emplace_back(name, pid);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  std::vector<FlightDump> dumps;
  for (const auto& [name, pid] : names) {
    struct stat st;
    // Ours and plain: record wrote it (AtomicFile: complete or absent).
    if (fstatat(partial_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid() || st.st_size > (1 << 24))
      continue;
    std::ifstream in(partial_path + "/" + name, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    JsonValue json;
    std::string error;
    if (!ParseJson(text.str(), &json, &error) || json.kind != JsonValue::kObject) continue;
    FlightDump dump;
    dump.pid = pid;
    dump.base = name.substr(0, name.size() - kStallJson.size());
    const JsonValue* reason = json.Find("reason");
    dump.reason = reason && reason->kind == JsonValue::kString ? reason->string : "";
    dump.from_ns = Number(json, "from_ns");
    dump.dump_ns = Number(json, "dump_ns");
    dump.dump_unix_ns = Number(json, "dump_unix_ns");
    dump.events = Number(json, "ring_records");
    dumps.push_back(std::move(dump));
  }
  return dumps;
}

}  // namespace torchprobe
