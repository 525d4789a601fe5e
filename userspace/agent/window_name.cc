#include "userspace/agent/window_name.h"

#include <charconv>
#include <cstdio>
#include <ctime>

#include "userspace/agent/target_text.h"
#include "userspace/base/utc_time.h"

namespace torchprobe {
namespace {

constexpr size_t kMaxHost = 64;
constexpr size_t kMaxRank = 32;
constexpr std::string_view kSuffix = ".pftrace";

bool Digits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  return true;
}

// "YYYYMMDDTHHMMSS.mmmZ"
bool UtcTime(std::string_view text) {
  return text.size() == 20 && Digits(text.substr(0, 8)) && text[8] == 'T' && Digits(text.substr(9, 6)) &&
         text[15] == '.' && Digits(text.substr(16, 3)) && text[19] == 'Z';
}

// Cuts "-<segment>" off the end of `*rest`; the segment, or nullopt.
std::optional<std::string_view> LastSegment(std::string_view* rest) {
  size_t dash = rest->rfind('-');
  if (dash == std::string_view::npos) return std::nullopt;
  std::string_view segment = rest->substr(dash + 1);
  rest->remove_suffix(rest->size() - dash);
  return segment;
}

}  // namespace

std::string MakeWindowName(std::string_view host, uint32_t pid, std::string_view rank, uint64_t unix_ns,
                           uint64_t sequence) {
  std::string safe_host = NameSafe(host.empty() ? "localhost" : host, kMaxHost, "-.");
  if (safe_host[0] == '.') safe_host[0] = '_';  // no hidden files
  std::string when = UtcTime(unix_ns, true);
  std::string name = safe_host + "-pid" + std::to_string(pid);
  if (!rank.empty()) name += "-rank" + NameSafe(rank, kMaxRank);
  return name + "-" + when + "-w" + std::to_string(sequence) + std::string(kSuffix);
}

std::optional<WindowName> ParseWindowName(std::string_view name) {
  if (!name.ends_with(kSuffix)) return std::nullopt;
  std::string_view rest = name.substr(0, name.size() - kSuffix.size());
  std::optional<std::string_view> sequence = LastSegment(&rest);
  if (!sequence || sequence->size() < 2 || (*sequence)[0] != 'w' || !Digits(sequence->substr(1))) return std::nullopt;
  std::optional<std::string_view> when = LastSegment(&rest);
  if (!when || !UtcTime(*when)) return std::nullopt;
  WindowName parsed;
  std::optional<std::string_view> segment = LastSegment(&rest);
  if (segment && segment->starts_with("rank")) {
    std::string_view rank = segment->substr(4);
    if (rank.empty() || rank.size() > kMaxRank || NameSafe(rank, kMaxRank) != rank) return std::nullopt;
    parsed.rank = rank;
    segment = LastSegment(&rest);
  }
  if (!segment || !segment->starts_with("pid") || !Digits(segment->substr(3)) || segment->size() > 13)
    return std::nullopt;
  uint64_t pid = 0;
  std::from_chars(segment->data() + 3, segment->data() + segment->size(), pid);
  if (pid == 0 || pid > UINT32_MAX) return std::nullopt;
  parsed.pid = static_cast<uint32_t>(pid);
  if (rest.empty() || rest.size() > kMaxHost || rest[0] == '.' || NameSafe(rest, kMaxHost, "-.") != rest)
    return std::nullopt;
  parsed.host = rest;
  return parsed;
}

std::string CompanionName(std::string_view window, std::string_view suffix) {
  if (window.ends_with(kSuffix)) window.remove_suffix(kSuffix.size());
  return std::string(window) + std::string(suffix);
}

bool IsCompanionOf(std::string_view name, std::string_view window) {
  if (!ParseWindowName(window)) return false;
  for (std::string_view suffix : {kEtSuffix, kKinetoSuffix, kStallTextSuffix, kStallJsonSuffix})
    if (name == CompanionName(window, suffix)) return true;
  return false;
}

}  // namespace torchprobe
