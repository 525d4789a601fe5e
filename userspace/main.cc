// torchprobe's command line: parsing and wiring only.
//
//   torchprobe record --pid PID[,PID...] [-o FILE] [--duration SECS]
//   torchprobe record [-o FILE] [--duration SECS] -- COMMAND [ARGS...]
//   torchprobe report FILE [--top N]
//
// Exit codes: 0 success, 1 runtime error, 2 usage error.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "userspace/report/report.h"
#include "userspace/session/record_session.h"
#include "userspace/session/target_launcher.h"

namespace torchprobe {
namespace {

constexpr int kUsageError = 2;

const char kUsage[] =
    "usage: torchprobe record --pid PID[,PID...] [-o FILE] [--duration SECS]\n"
    "       torchprobe record [-o FILE] [--duration SECS] -- COMMAND [ARGS...]\n"
    "       torchprobe report FILE [--top N]\n"
    "\n"
    "record options:\n"
    "  -p, --pid PIDS       attach to running processes (comma-separated)\n"
    "  -o, --output FILE    Perfetto trace to write (default torchprobe.pftrace)\n"
    "  -d, --duration SECS  stop after SECS seconds (default: Ctrl-C or targets exit)\n"
    "      --attach MODE    auto (default), multi (uprobe_multi only), uprobe (per symbol)\n"
    "      --ring-mb N      op ring buffer size in MiB, a power of 2 (default 64)\n"
    "  -q, --quiet          no status line, no summary\n";

int Usage(const std::string& message) {
  std::fprintf(stderr, "torchprobe: %s\n", message.c_str());
  std::fprintf(stderr, "Try 'torchprobe --help'.\n");
  return kUsageError;
}

bool ParseUnsigned(const std::string& text, unsigned long max, unsigned long* value) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  unsigned long v = std::strtoul(text.c_str(), nullptr, 10);
  if (errno || v == 0 || v > max) return false;
  *value = v;
  return true;
}

// Takes "--flag VALUE", "--flag=VALUE" and "-f VALUE"; returns false if
// `arg` is not this flag, and sets `*missing` when its value is absent.
bool TakeValue(const std::vector<std::string>& args, size_t* i, const char* long_name,
               const char* short_name, std::string* value, bool* missing) {
  const std::string& arg = args[*i];
  std::string prefix = std::string(long_name) + "=";
  if (arg.rfind(prefix, 0) == 0) {
    *value = arg.substr(prefix.size());
    return true;
  }
  if (arg != long_name && (!short_name || arg != short_name)) return false;
  if (*i + 1 >= args.size()) {
    *missing = true;
    return true;
  }
  *value = args[++*i];
  return true;
}

int Record(const std::vector<std::string>& args) {
  RecordOptions options;
  options.output = "torchprobe.pftrace";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::string value;
    bool missing = false;
    if (arg == "--") {
      options.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      if (options.command.empty()) return Usage("'--' must be followed by a command");
      break;
    } else if (TakeValue(args, &i, "--pid", "-p", &value, &missing)) {
      if (missing) return Usage("--pid needs a value");
      size_t start = 0;
      while (start <= value.size()) {
        size_t end = value.find(',', start);
        if (end == std::string::npos) end = value.size();
        std::string text = value.substr(start, end - start);
        unsigned long pid;
        if (!ParseUnsigned(text, 0x3fffffff, &pid))
          return Usage("invalid pid '" + text + "': not a positive number");
        options.pids.push_back(static_cast<uint32_t>(pid));
        start = end + 1;
      }
    } else if (TakeValue(args, &i, "--output", "-o", &value, &missing)) {
      if (missing || value.empty()) return Usage("--output needs a file name");
      options.output = value;
    } else if (TakeValue(args, &i, "--duration", "-d", &value, &missing)) {
      char* end = nullptr;
      options.duration_s = missing ? 0 : std::strtod(value.c_str(), &end);
      if (missing || end == value.c_str() || *end || options.duration_s <= 0)
        return Usage("invalid --duration '" + value + "': expected seconds > 0");
    } else if (TakeValue(args, &i, "--attach", nullptr, &value, &missing)) {
      if (missing || (value != "auto" && value != "multi" && value != "uprobe"))
        return Usage("invalid --attach '" + value + "': expected auto, multi or uprobe");
      options.attach = value;
    } else if (TakeValue(args, &i, "--ring-mb", nullptr, &value, &missing)) {
      unsigned long mb;
      if (missing || !ParseUnsigned(value, 4096, &mb) || (mb & (mb - 1)))
        return Usage("invalid --ring-mb '" + value + "': expected a power of 2 up to 4096");
      options.ring_mb = static_cast<uint32_t>(mb);
    } else if (arg == "--empty-probes") {  // bench: the cost floor
      options.empty_probes = true;
    } else if (arg == "--empty-probes=uretprobe") {  // bench: the uretprobe floor
      options.empty_probes = options.empty_uretprobes = true;
    } else if (arg == "-q" || arg == "--quiet") {
      options.quiet = true;
    } else {
      return Usage("unknown option '" + arg + "' for record");
    }
  }
  if (options.pids.empty() && options.command.empty())
    return Usage("record needs --pid PID or -- COMMAND");
  if (!options.pids.empty() && !options.command.empty())
    return Usage("record takes --pid or a command, not both");
  if (!options.command.empty()) {
    StatusOr<std::string> resolved = ResolveCommand(options.command[0]);
    if (!resolved.ok()) return Usage(resolved.status().message());
  }
  return RunRecord(options);
}

int ReportCommand(const std::vector<std::string>& args) {
  std::string path;
  size_t top = 30;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string value;
    bool missing = false;
    if (TakeValue(args, &i, "--top", "-n", &value, &missing)) {
      unsigned long n;
      if (missing || !ParseUnsigned(value, 1000000, &n))
        return Usage("invalid --top '" + value + "': expected a positive number");
      top = n;
    } else if (args[i].size() > 1 && args[i][0] == '-') {
      return Usage("unknown option '" + args[i] + "' for report");
    } else if (path.empty()) {
      path = args[i];
    } else {
      return Usage("report takes one trace file");
    }
  }
  if (path.empty()) return Usage("report needs a trace file");
  std::string error;
  if (!Report(path, std::cout, &error, top)) {
    std::fprintf(stderr, "torchprobe: %s\n", error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace torchprobe

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return torchprobe::Usage("missing command: record or report");
  std::string command = args[0];
  args.erase(args.begin());
  if (command == "-h" || command == "--help" || command == "help") {
    std::fputs(torchprobe::kUsage, stdout);
    return 0;
  }
  if (command == "record") return torchprobe::Record(args);
  if (command == "report") return torchprobe::ReportCommand(args);
  return torchprobe::Usage("unknown command '" + command + "'");
}
