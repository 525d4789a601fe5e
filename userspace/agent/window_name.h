// The name of a window file, made and read back in one place:
//
//   HOST-pidP[-rankR]-YYYYMMDDTHHMMSS.mmmZ-wN.pftrace
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

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_WINDOW_NAME_H
