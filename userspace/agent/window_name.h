// The name of a window file, made and read back in one place:
//
//   HOST-pidP[-rankR]-YYYYMMDDTHHMMSS.mmmZ-wN.pftrace
//
// and its companions (the ET and Kineto JSON a window may carry, a flight
// recorder dump's stall report): the same name with .et.json, .kineto.json,
// .stall.txt or .stall.json for .pftrace. A flight recorder's dump is named
// and kept as a window is (its index entry says which dump).
//
// HOST is the host name and R the target's RANK, both made NameSafe
// (target_text.h): R keeps letters, digits and '_' only (at most 32), so a
// name is split back from its end without doubt. The store trusts an index
// line only for a name of this form (window_store.h), and merge reads the
// host and rank back from it (trace_merge.h); neither uses a regex or throws.
#ifndef TORCHPROBE_AGENT_WINDOW_NAME_H
#define TORCHPROBE_AGENT_WINDOW_NAME_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace torchprobe {

struct WindowName {
  std::string host;
  uint32_t pid = 0;
  std::string rank;  // "" when the target had none
};

// `unix_ns` is the window's start (CLOCK_REALTIME); `sequence` its number
// in this agent's run.
std::string MakeWindowName(std::string_view host, uint32_t pid, std::string_view rank, uint64_t unix_ns,
                           uint64_t sequence);

// The parts of a name MakeWindowName makes; nullopt for any other name.
std::optional<WindowName> ParseWindowName(std::string_view name);

// A window's other files (window_child.h's WindowContents): its name with
// .pftrace replaced by one of these.
inline constexpr std::string_view kEtSuffix = ".et.json";
inline constexpr std::string_view kKinetoSuffix = ".kineto.json";
// A flight recorder dump's stall report (record --flight-recorder).
inline constexpr std::string_view kStallTextSuffix = ".stall.txt";
inline constexpr std::string_view kStallJsonSuffix = ".stall.json";
// `window` (a name MakeWindowName made) with `suffix` for .pftrace.
std::string CompanionName(std::string_view window, std::string_view suffix);
// Whether `name` is `window`'s companion of a known suffix.
bool IsCompanionOf(std::string_view name, std::string_view window);

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_WINDOW_NAME_H
