#include "userspace/agent/window_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>
#include <vector>

#include "userspace/agent/window_name.h"
#include "userspace/discover/probe_plan_cache.h"

extern char** environ;

namespace torchprobe {

std::vector<std::string> WindowEnvironment(const char* const* environment, const std::string& plan_cache) {
  std::string key = std::string(kPlanCacheEnv) + "=";
  std::vector<std::string> out;
  for (const char* const* entry = environment; entry && *entry; ++entry)
    if (!std::string_view(*entry).starts_with(key)) out.emplace_back(*entry);
  // The agent's own --plan-cache wins over an inherited variable: the
  // command line is what the operator asked for.
  if (!plan_cache.empty()) out.push_back(key + plan_cache);
  return out;
}

std::vector<std::string> WindowContents::CompanionSuffixes() const {
  std::vector<std::string> suffixes;
  if (et) suffixes.emplace_back(kEtSuffix);
  if (chrome) suffixes.emplace_back(kKinetoSuffix);
  return suffixes;
}

pid_t StartWindow(const WindowRequest& request, std::string* error) {
  char duration[32];
  std::snprintf(duration, sizeof duration, "%.3f", request.duration_s);
  std::string pid = std::to_string(request.pid);
  // --no-children: the agent finds a target's workers itself, each its own
  // target, so that no process is traced by two windows at once.
  std::vector<std::string> args = {"torchprobe", "record", "--pid", pid, "--duration", duration,
                                   "--no-children", "--mode", request.mode, "-o", request.output};
  if (request.attach != "auto") args.insert(args.end() - 2, {"--attach", request.attach});
  const WindowContents& contents = request.contents;
  std::vector<std::string> extra;
  if (request.flight.seconds > 0) {  // runs until the target exits or the agent stops it
    const FlightOptions& flight = request.flight;
    char number[32];
    args.erase(args.begin() + 4, args.begin() + 6);  // --duration S
    std::snprintf(number, sizeof number, "%.3f", flight.seconds);
    extra.insert(extra.end(), {"--flight-recorder", number, "--flight-tier", flight.light ? "light" : "full",
                               "--flight-bytes", std::to_string(flight.bytes)});
    std::snprintf(number, sizeof number, "%.3f", flight.stall_after_s);
    extra.insert(extra.end(), {"--stall-after", number});
    std::snprintf(number, sizeof number, "%.3f", flight.stall_factor);
    extra.insert(extra.end(), {"--stall-factor", number});
  }
  bool light = request.flight.seconds > 0 && request.flight.light;  // its own probes only
  if (contents.memory && !light) extra.push_back("--memory");
  if (contents.shapes && !light) extra.push_back("--shapes");
  if (contents.python_stacks) extra.push_back("--python-stacks");  // the light tier's few entries too
  if (contents.sched) extra.push_back("--sched");
  if (contents.inject_cupti && request.flight.seconds == 0) extra.push_back("--inject-cupti");
  // The step a window attaches in is partial (ProfilerStep#0 runs from the
  // attach to the first step's end): skipped, so that a window is N whole steps.
  if (contents.steps && request.flight.seconds == 0) extra.insert(extra.end(), {"--skip-steps", "1", "--steps", std::to_string(contents.steps)});
  if (!contents.step_marker.empty()) extra.insert(extra.end(), {"--step-marker", contents.step_marker});
  // A flight recorder writes them with each dump (record numbers each file
  // with the dump's suffix; FlightDumpCompanion finds them).
  if (contents.et) extra.insert(extra.end(), {"--et", CompanionName(request.output, kEtSuffix)});
  if (contents.chrome) extra.insert(extra.end(), {"--chrome", CompanionName(request.output, kKinetoSuffix)});
  args.insert(args.end() - 2, extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = WindowEnvironment(environ, request.plan_cache);
  std::vector<char*> envp;
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  pid_t parent = getpid();
  pid_t child = fork();
  if (child < 0) {
    *error = std::string("cannot start a window: fork: ") + std::strerror(errno);
    return -1;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // the agent died before prctl
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // the agent blocks its signals for signalfd
    if (fchdir(request.folder_fd) != 0) _exit(126);
    int null = open("/dev/null", O_RDONLY);
    int log = openat(request.folder_fd, request.log.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     0600);
    if (null >= 0) dup2(null, 0);
    if (log >= 0) {
      dup2(log, 1);
      dup2(log, 2);
    }
    execve("/proc/self/exe", argv.data(), envp.data());
    std::fprintf(stderr, "torchprobe agent: cannot run record: %s\n", std::strerror(errno));
    _exit(127);
  }
  return child;
}

WindowLog ReadWindowLog(const std::string& log_path) {
  WindowLog log;
  std::ifstream in(log_path);
  std::string line;
  constexpr std::string_view kDetach = ", detach ";
  size_t read = 0;
  while (read < (1u << 20) && std::getline(in, line)) {
    read += line.size() + 1;
    if (!line.empty()) log.last_line = line;
    if (line.find(kPlanCacheRejected) != std::string::npos) ++log.plan_cache_rejected;
    size_t at = line.find(kDetach);
    if (at == std::string::npos || log.detach_ns) continue;
    const char* begin = line.c_str() + at + kDetach.size();
    const char* digits_end = begin;
    while (*digits_end == '.' || (*digits_end >= '0' && *digits_end <= '9')) ++digits_end;
    if (digits_end == begin || std::string_view(digits_end).substr(0, 3) != " ms") continue;
    double ms = 0;
    auto [end, error] = std::from_chars(begin, digits_end, ms);
    if (error == std::errc() && end == digits_end && ms >= 0 && ms < 1e9) log.detach_ns = static_cast<uint64_t>(ms * 1e6);
  }
  if (log.last_line.empty()) log.last_line = "no message";
  return log;
}

}  // namespace torchprobe
