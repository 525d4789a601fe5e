#include "userspace/agent/window_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <vector>

namespace torchprobe {

pid_t StartWindow(const WindowRequest& request, std::string* error) {
  char duration[32];
  std::snprintf(duration, sizeof duration, "%.3f", request.duration_s);
  std::string pid = std::to_string(request.pid);
  // --no-children: the agent finds a target's workers itself, each its own
  // target, so that no process is traced by two windows at once.
  std::vector<std::string> args = {"torchprobe", "record", "--pid", pid, "--duration", duration,
                                   "--no-children", "-o", request.output};
  if (request.attach != "auto") args.insert(args.end() - 2, {"--attach", request.attach});
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
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
    int null = open("/dev/null", O_RDONLY);
    int log = open(request.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (!request.plan_cache.empty()) setenv("TORCHPROBE_PLAN_CACHE", request.plan_cache.c_str(), 0);
    if (null >= 0) dup2(null, 0);
    if (log >= 0) {
      dup2(log, 1);
      dup2(log, 2);
    }
    execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "torchprobe agent: cannot run record: %s\n", std::strerror(errno));
    _exit(127);
  }
  return child;
}

uint64_t DetachNsFromLog(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line;
  static const std::regex kDetach(R"(, detach ([0-9]+(\.[0-9]+)?) ms)");
  std::smatch match;
  while (std::getline(in, line))
    if (std::regex_search(line, match, kDetach)) return static_cast<uint64_t>(std::stod(match[1]) * 1e6);
  return 0;
}

}  // namespace torchprobe
