// A flight recorder's options (record --flight-recorder, agent
// --flight-recorder): one struct and one parser for both commands.
#ifndef TORCHPROBE_SESSION_FLIGHT_OPTIONS_H
#define TORCHPROBE_SESSION_FLIGHT_OPTIONS_H

#include <cstdint>
#include <string>
#include <vector>

namespace torchprobe {

// --flight-recorder: the last seconds of events kept in memory, written
// only when asked (SIGUSR2), at a stall, or when a target dies by a signal.
struct FlightOptions {
  double seconds = 0;              // --flight-recorder SECS; 0: off
  uint64_t bytes = 256ull << 20;   // --flight-bytes: the ring's budget
  double stall_after_s = 60;       // --stall-after: a stall is no step for at least this long
  double stall_factor = 10;        // --stall-factor: ... and for K x the median step
  // --flight-tier light: only what hang and slowdown triage needs, cheap
  // enough to stay on: step boundaries (annotations, or a marker op), c10d
  // collectives, CUDA synchronizations and NCCL calls. record's default is
  // full, the agent's light.
  bool light = false;
};

enum class FlightArg {
  kNone,      // args[*i] is no flight recorder option
  kRecorder,  // --flight-recorder SECS, taken
  kTuned,     // one of the others, taken (they go with --flight-recorder)
  kBad,       // one of them with a bad value: *error says which, in one line
};

// Takes the flight recorder option at args[*i] (and its value) into
// *flight: --flight-recorder, --stall-after and --stall-factor (numbers > 0
// up to `max_seconds`), --flight-bytes (a size of at least 1M), --flight-tier
// (light or full).
FlightArg TakeFlightOption(const std::vector<std::string>& args, size_t* i, double max_seconds, FlightOptions* flight,
                           std::string* error);

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_FLIGHT_OPTIONS_H
