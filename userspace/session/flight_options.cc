// Parsing a flight recorder's options; see the header.
#include "userspace/session/flight_options.h"

#include <cerrno>
#include <cstdlib>

#include "userspace/cli_args.h"

namespace torchprobe {

FlightArg TakeFlightOption(const std::vector<std::string>& args, size_t* i, double max_seconds, FlightOptions* flight,
                           std::string* error) {
  std::string value;
  bool missing = false;
  const std::string flag = args[*i].substr(0, args[*i].find('='));
  if (TakeValue(args, i, "--flight-recorder", nullptr, &value, &missing) ||
      TakeValue(args, i, "--stall-after", nullptr, &value, &missing) ||
      TakeValue(args, i, "--stall-factor", nullptr, &value, &missing)) {
    char* end = nullptr;
    errno = 0;
    double number = missing ? 0 : std::strtod(value.c_str(), &end);
    if (missing || end == value.c_str() || *end || errno || !(number > 0) || number > max_seconds) {
      *error = "invalid " + flag + " '" + value + "': expected " +
               (flag == "--stall-factor" ? "a factor > 0" : "seconds > 0") + " up to " +
               std::to_string(static_cast<uint64_t>(max_seconds));
      return FlightArg::kBad;
    }
    (flag == "--flight-recorder" ? flight->seconds : flag == "--stall-after" ? flight->stall_after_s
                                                                             : flight->stall_factor) = number;
    return flag == "--flight-recorder" ? FlightArg::kRecorder : FlightArg::kTuned;
  }
  if (TakeValue(args, i, "--flight-bytes", nullptr, &value, &missing)) {
    if (missing || !ParseByteSize(value, &flight->bytes) || flight->bytes < (1u << 20)) {
      *error = "invalid --flight-bytes '" + value + "': expected a size of at least 1M, e.g. 512M or 2G";
      return FlightArg::kBad;
    }
    return FlightArg::kTuned;
  }
  if (TakeValue(args, i, "--flight-tier", nullptr, &value, &missing)) {
    if (missing || (value != "light" && value != "full")) {
      *error = "invalid --flight-tier '" + value + "': expected light or full";
      return FlightArg::kBad;
    }
    flight->light = value == "light";
    return FlightArg::kTuned;
  }
  return FlightArg::kNone;
}

}  // namespace torchprobe
