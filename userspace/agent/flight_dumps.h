// The agent's side of a target's flight recorder (a `record --flight-recorder`
// child writing into the store's .partial folder as flight-PID.pftrace): the
// dumps it has finished there (a dump's .stall.json is written last) and
// what their stall reports say, so that the agent names, indexes and rotates
// them as windows.
#ifndef TORCHPROBE_AGENT_FLIGHT_DUMPS_H
#define TORCHPROBE_AGENT_FLIGHT_DUMPS_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace torchprobe {

// The output name a target's flight recorder is given in .partial.
std::string FlightOutputName(uint32_t pid);

struct FlightDump {
  uint32_t pid = 0;  // whose flight recorder wrote it
  std::string base;  // its files in .partial: base + ".pftrace", ".stall.txt", ".stall.json", ...
  std::string reason;
  uint64_t from_ns = 0, dump_ns = 0, dump_unix_ns = 0;  // as its stall report says
  uint64_t events = 0;
};

// The name of `dump`'s companion file of `suffix` (".kineto.json",
// ".et.json") in .partial: record numbers each of its outputs with the
// dump's own suffix before their extension (flight-PID.kineto.SUFFIX.json
// beside flight-PID.SUFFIX.pftrace).
std::string FlightDumpCompanion(const FlightDump& dump, std::string_view suffix);

// The finished dumps of every flight recorder in the folder `partial_fd`
// (one listing), oldest name first; each read from its stall report (one
// that cannot be read is skipped: its record may still be writing it).
std::vector<FlightDump> FinishedFlightDumps(int partial_fd, const std::string& partial_path);

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_FLIGHT_DUMPS_H
