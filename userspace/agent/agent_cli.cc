#include "userspace/agent/agent_cli.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstdlib>

#include "userspace/agent/agent.h"
#include "userspace/agent/target_scan.h"
#include "userspace/agent/trace_merge.h"
#include "userspace/agent/trigger_socket.h"
#include "userspace/base/atomic_file.h"
#include "userspace/cli_args.h"
#include "userspace/discover/probe_plan_cache.h"
#include "userspace/session/flight_options.h"

namespace torchprobe {
namespace {

const char kAgentUsage[] =
    "usage: torchprobe agent -o DIR [OPTIONS]\n"
    "\n"
    "Runs until SIGTERM: finds every process that loads PyTorch (libtorch_cpu.so),\n"
    "containers included, and traces each for --window seconds every --every\n"
    "seconds, within a duty-cycle budget measured as it runs. One Perfetto file\n"
    "per window and process in DIR, listed in DIR/index.jsonl. Runs as root.\n"
    "\n"
    "  -o, --output DIR      the output folder (created)\n"
    "      --every SECS      a window per process at most this often (default 60)\n"
    "      --window SECS     each window's length (default 2)\n"
    "      --align SECS      windows start at wall-clock multiples of SECS, so every\n"
    "                        rank on every host captures the same interval (hosts\n"
    "                        synced by NTP: within their offset): a window due\n"
    "                        starts at the next multiple\n"
    "      --budget PCT      the windows' cost to a process (attach, probe hits,\n"
    "                        detach; a failed window: its record's CPU time) over\n"
    "                        its CPU time, at most (default 1; none: every window\n"
    "                        is taken); a window is taken when 1.5 times its\n"
    "                        expected cost fits, the first one too\n"
    "      --max-bytes B     keep at most B bytes of windows, oldest removed first\n"
    "                        (default 1073741824; suffixes K, M, G; 0: no bound)\n"
    "      --max-files N     keep at most N windows (default 1000; 0: no bound)\n"
    "      --max-targets N   sample at most N processes at once; more are counted\n"
    "                        and left out (default 256)\n"
    "      --max-windows N   run at most N windows at once; more wait (default 4)\n"
    "      --mode MODE       the windows' and the index's file mode (default 0600:\n"
    "                        they hold every process' command line), e.g. 0640\n"
    "      --match-comm RE   only processes whose comm matches RE (RE2 syntax)\n"
    "      --match-cgroup RE only processes whose cgroup path matches RE\n"
    "      --match-cmdline RE  only processes whose command line (its first 4096\n"
    "                        bytes) matches RE\n"
    "      --pid PIDS        only these processes (comma-separated)\n"
    "      --socket PATH     where `torchprobe trigger` reaches the agent\n"
    "                        (default /run/torchprobe-agent.sock)\n"
    "      --metrics ADDR    serve Prometheus metrics on IPV4:PORT (127.0.0.1:9464);\n"
    "                        a loopback address only, unless\n"
    "      --metrics-any-address  also another address (every host that reaches\n"
    "                        it reads the counters)\n"
    "      --scan SECS       how often /proc is walked for new processes (default 1)\n"
    "      --plan-cache DIR  where libtorch probe plans are cached, so that a window\n"
    "                        starts fast (default $TORCHPROBE_PLAN_CACHE, else\n"
    "                        /var/cache/torchprobe/plans; a folder of root's that\n"
    "                        no one else can write, or the agent does not start)\n"
    "      --attach MODE     how windows attach: auto, multi or uprobe (record's\n"
    "                        --attach; uprobe is what kernels before 6.6 get)\n"
    "\n"
    "What each window holds (record's options of the same names): ops, annotations\n"
    "and training steps always; and\n"
    "      --memory          every CPU allocation and free\n"
    "      --shapes          each op's Tensor arguments\n"
    "      --python-stacks   the Python stack each op was called from (also in flight dumps)\n"
    "      --sched           why each thread was off its CPU: preempted, blocked, GIL\n"
    "      --et              PyTorch's execution trace JSON beside each window (NAME.et.json)\n"
    "      --chrome          Kineto-style JSON beside each window (NAME.kineto.json)\n"
    "      --inject-cupti    GPU activity (CUPTI): loads torchprobe's collector into\n"
    "                        each target at its first window (opt-in: see record --help)\n"
    "      --steps N         a window is N whole training steps (ProfilerStep#), from\n"
    "                        the next step boundary on; --window is then how long a\n"
    "                        window waits for and runs its steps (default 60)\n"
    "      --step-marker NAME  what ends a step (record's --step-marker)\n"
    "\n"
    "A flight recorder beside the windows (record's options of the same names):\n"
    "      --flight-recorder SECS  each process' last SECS seconds kept in memory by\n"
    "                        a record of its own, written as a dump (listed in the\n"
    "                        index with its reason) on `trigger --dump`, at a stall\n"
    "                        or when the process dies by a signal\n"
    "      --flight-tier T   light (default: steps, collectives, CUDA waits) or full\n"
    "      --flight-bytes N, --stall-after SECS, --stall-factor K\n"
    "      --dump-at-stop    at SIGTERM, a dump of each process before stopping\n"
    "      --no-windows      the flight recorder only: no sampling windows\n"
    "      --job-env VAR     the environment variable that names a process' job in\n"
    "                        the metrics (default TORCHELASTIC_RUN_ID, else\n"
    "                        MASTER_ADDR:MASTER_PORT)\n"
    "  -h, --help            this help\n";

const char kTriggerUsage[] =
    "usage: torchprobe trigger --pid PID [--duration SECS] [--socket PATH]\n"
    "       torchprobe trigger --pid PID --dump [--socket PATH]\n"
    "\n"
    "Asks the running agent for a window on PID now (default 2 s), or with --dump\n"
    "for its flight recorder's dump of PID's last seconds (agent --flight-recorder);\n"
    "prints the file once it is written.\n";

const char kMergeUsage[] =
    "usage: torchprobe merge [--mode MODE] OUT.pftrace IN.pftrace...\n"
    "\n"
    "Puts several traces (windows of several ranks or hosts) into one Perfetto\n"
    "trace, a process track per traced process, named by rank and host. OUT's\n"
    "mode is 0600 unless --mode says otherwise (e.g. 0644).\n";

int Usage(const std::string& message, const char* command) {
  std::fprintf(stderr, "torchprobe: %s\nTry 'torchprobe %s --help'.\n", message.c_str(), command);
  return 2;
}

// A pid: digits only, 1 to 2^30 - 1.
bool Pid(const std::string& text, uint32_t* pid) {
  uint64_t value = 0;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 10) return false;
  value = std::strtoull(text.c_str(), nullptr, 10);
  if (value == 0 || value > 0x3fffffff) return false;
  *pid = static_cast<uint32_t>(value);
  return true;
}

// A count: digits only, 1 to 1,000,000.
bool Count(const std::string& text, size_t* count) {
  if (text.empty() || text.size() > 7 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  unsigned long value = std::strtoul(text.c_str(), nullptr, 10);
  if (value == 0 || value > 1'000'000) return false;
  *count = value;
  return true;
}

constexpr double kMaxSeconds = 86400;  // a day: the longest time any agent option takes

bool Seconds(const std::string& text, double* seconds) {
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end || errno || !(value > 0) || value > kMaxSeconds) return false;
  *seconds = value;
  return true;
}

}  // namespace

int AgentCommand(const std::vector<std::string>& args) {
  AgentOptions options;
  options.flight.light = true;  // the agent's default tier: cheap enough for every target
  options.socket = kDefaultAgentSocket;
  bool window_given = false;
  bool flight_tuned = false;  // a flight recorder option other than --flight-recorder
  // $TORCHPROBE_PLAN_CACHE is the default; --plan-cache, when given, wins.
  if (const char* env = std::getenv(kPlanCacheEnv); env && *env) options.plan_cache = env;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string value;
    bool missing = false;
    const std::string flag = args[i].substr(0, args[i].find('='));
    if (IsHelp(args[i])) {
      std::fputs(kAgentUsage, stdout);
      return 0;
    } else if (TakeValue(args, &i, "--output", "-o", &value, &missing)) {
      if (missing || value.empty()) return Usage("--output needs a folder", "agent");
      options.dir = value;
    } else if (TakeValue(args, &i, "--every", nullptr, &value, &missing) ||
               TakeValue(args, &i, "--window", nullptr, &value, &missing) ||
               TakeValue(args, &i, "--scan", nullptr, &value, &missing) ||
               TakeValue(args, &i, "--align", nullptr, &value, &missing)) {
      double* target = flag == "--every"    ? &options.every_s
                       : flag == "--window" ? &options.window_s
                       : flag == "--align"  ? &options.align_s
                                            : &options.scan_s;
      if (missing || !Seconds(value, target))
        return Usage("invalid " + flag + " '" + value + "': expected seconds > 0", "agent");
      window_given |= flag == "--window";
    } else if (TakeValue(args, &i, "--budget", nullptr, &value, &missing)) {
      if (value == "none") {
        options.budget_pct = 0;
        continue;
      }
      char* end = nullptr;
      options.budget_pct = missing ? 0 : std::strtod(value.c_str(), &end);
      if (missing || end == value.c_str() || *end || !(options.budget_pct > 0) || options.budget_pct > 100)
        return Usage("invalid --budget '" + value + "': expected a percentage in (0, 100]", "agent");
    } else if (TakeValue(args, &i, "--max-bytes", nullptr, &value, &missing)) {
      if (missing || !ParseByteSize(value, &options.max_bytes))
        return Usage("invalid --max-bytes '" + value + "': expected bytes (K, M, G suffixes)", "agent");
    } else if (TakeValue(args, &i, "--max-files", nullptr, &value, &missing)) {
      if (missing || !ParseByteSize(value, &options.max_files) || value.find_first_not_of("0123456789") != std::string::npos)
        return Usage("invalid --max-files '" + value + "': expected a number", "agent");
    } else if (TakeValue(args, &i, "--match-comm", nullptr, &value, &missing) ||
               TakeValue(args, &i, "--match-cgroup", nullptr, &value, &missing) ||
               TakeValue(args, &i, "--match-cmdline", nullptr, &value, &missing)) {
      auto* target = flag == "--match-comm" ? &options.filter.comm
                     : flag == "--match-cgroup" ? &options.filter.cgroup
                                                : &options.filter.cmdline;
      *target = missing ? nullptr : CompileFilter(value);
      if (!*target) return Usage("invalid " + flag + " '" + value + "': expected a regular expression (RE2)", "agent");
    } else if (TakeValue(args, &i, "--pid", "-p", &value, &missing)) {
      size_t start = 0;
      while (!missing && start <= value.size()) {
        size_t end = value.find(',', start);
        if (end == std::string::npos) end = value.size();
        std::string text = value.substr(start, end - start);
        uint32_t pid = 0;
        if (!Pid(text, &pid)) return Usage("invalid pid '" + text + "': not a positive number", "agent");
        options.filter.pids.push_back(pid);
        start = end + 1;
      }
      if (missing) return Usage("--pid needs a value", "agent");
    } else if (TakeValue(args, &i, "--socket", nullptr, &value, &missing)) {
      if (missing || value.empty()) return Usage("--socket needs a path", "agent");
      options.socket = value;
    } else if (TakeValue(args, &i, "--plan-cache", nullptr, &value, &missing)) {
      if (missing || value.empty()) return Usage("--plan-cache needs a folder", "agent");
      options.plan_cache = value;
    } else if (TakeValue(args, &i, "--attach", nullptr, &value, &missing)) {
      if (missing || (value != "auto" && value != "multi" && value != "uprobe"))
        return Usage("invalid --attach '" + value + "': expected auto, multi or uprobe", "agent");
      options.attach = value;
    } else if (TakeValue(args, &i, "--metrics", nullptr, &value, &missing)) {
      if (missing || value.empty()) return Usage("--metrics needs IPV4:PORT", "agent");
      options.metrics = value;
    } else if (args[i] == "--metrics-any-address") {
      options.metrics_any_address = true;
    } else if (TakeValue(args, &i, "--max-targets", nullptr, &value, &missing) ||
               TakeValue(args, &i, "--max-windows", nullptr, &value, &missing)) {
      size_t* target = flag == "--max-targets" ? &options.max_targets : &options.max_windows;
      if (missing || !Count(value, target))
        return Usage("invalid " + flag + " '" + value + "': expected a number from 1 to 1000000", "agent");
    } else if (TakeValue(args, &i, "--mode", nullptr, &value, &missing)) {
      if (missing || !ParseFileMode(value, &options.mode))
        return Usage("invalid --mode '" + value + "': expected octal read/write bits with 0600, e.g. 0640", "agent");
    } else if (args[i] == "--memory" || args[i] == "--shapes" || args[i] == "--et" || args[i] == "--chrome" ||
               args[i] == "--inject-cupti" || args[i] == "--python-stacks" || args[i] == "--sched") {
      WindowContents& c = options.contents;
      (args[i] == "--memory" ? c.memory : args[i] == "--shapes" ? c.shapes : args[i] == "--et" ? c.et
       : args[i] == "--chrome" ? c.chrome : args[i] == "--python-stacks" ? c.python_stacks
       : args[i] == "--sched" ? c.sched : c.inject_cupti) = true;
    } else if (TakeValue(args, &i, "--steps", nullptr, &value, &missing)) {
      size_t steps = 0;
      if (missing || !Count(value, &steps))
        return Usage("invalid --steps '" + value + "': expected a number from 1 to 1000000", "agent");
      options.contents.steps = steps;
    } else if (TakeValue(args, &i, "--step-marker", nullptr, &value, &missing)) {
      if (missing || value.empty() || value == "*")
        return Usage("--step-marker needs an annotation or op name", "agent");
      options.contents.step_marker = value;
    } else if (FlightArg flight = TakeFlightOption(args, &i, kMaxSeconds, &options.flight, &value);
               flight != FlightArg::kNone) {
      if (flight == FlightArg::kBad) return Usage(value, "agent");
      flight_tuned |= flight == FlightArg::kTuned;
    } else if (args[i] == "--dump-at-stop") {
      options.dump_at_stop = true;
      flight_tuned = true;
    } else if (args[i] == "--no-windows") {
      options.windows = false;
    } else if (TakeValue(args, &i, "--job-env", nullptr, &value, &missing)) {
      if (missing || value.empty() || value.find_first_of("=\0") != std::string::npos)
        return Usage("--job-env needs an environment variable's name", "agent");
      options.job_env = value;
    } else {
      return Usage("unknown option '" + args[i] + "' for agent", "agent");
    }
  }
  if (options.dir.empty()) return Usage("agent needs -o DIR", "agent");
  if (flight_tuned && options.flight.seconds == 0)
    return Usage("--flight-bytes, --flight-tier, --stall-after, --stall-factor and --dump-at-stop go with "
                 "--flight-recorder SECS", "agent");
  if (!options.windows && options.flight.seconds == 0)
    return Usage("--no-windows leaves nothing to do without --flight-recorder", "agent");
  if (options.contents.steps && options.contents.sched)
    return Usage("--steps does not go with --sched yet (as record's)", "agent");
  if (options.contents.steps && !window_given) options.window_s = std::min(60.0, options.every_s);
  if (options.every_s < options.window_s) return Usage("--every must be at least --window", "agent");
  return RunAgent(options);
}

int TriggerCommand(const std::vector<std::string>& args) {
  TriggerRequest request;
  request.duration_s = 2;
  std::string socket = kDefaultAgentSocket;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string value;
    bool missing = false;
    if (IsHelp(args[i])) {
      std::fputs(kTriggerUsage, stdout);
      return 0;
    } else if (TakeValue(args, &i, "--pid", "-p", &value, &missing)) {
      if (missing || !Pid(value, &request.pid))
        return Usage("invalid --pid '" + value + "': not a positive number", "trigger");
    } else if (TakeValue(args, &i, "--duration", "-d", &value, &missing)) {
      if (missing || !Seconds(value, &request.duration_s) || request.duration_s > 3600)
        return Usage("invalid --duration '" + value + "': expected seconds in (0, 3600]", "trigger");
    } else if (args[i] == "--dump") {
      request.dump = true;
    } else if (TakeValue(args, &i, "--socket", nullptr, &value, &missing)) {
      if (missing || value.empty()) return Usage("--socket needs a path", "trigger");
      socket = value;
    } else {
      return Usage("unknown option '" + args[i] + "' for trigger", "trigger");
    }
  }
  if (!request.pid) return Usage("trigger needs --pid PID", "trigger");
  std::string answer = SendTrigger(socket, request);
  if (answer.rfind("ok ", 0) == 0) {
    std::printf("%s\n", answer.substr(3).c_str());
    return 0;
  }
  std::fprintf(stderr, "torchprobe: %s\n", answer.rfind("error ", 0) == 0 ? answer.substr(6).c_str() : answer.c_str());
  return 1;
}

int MergeCommand(const std::vector<std::string>& all_args) {
  for (const std::string& arg : all_args)
    if (IsHelp(arg)) {
      std::fputs(kMergeUsage, stdout);
      return 0;
    }
  std::vector<std::string> args;  // without --mode and its value
  for (size_t i = 0; i < all_args.size(); ++i) {
    std::string value;
    bool missing = false;
    if (!TakeValue(all_args, &i, "--mode", nullptr, &value, &missing)) {
      args.push_back(all_args[i]);
      continue;
    }
    mode_t mode = 0;
    if (missing || !ParseFileMode(value, &mode))
      return Usage("invalid --mode '" + value + "': expected octal read/write bits with 0600, e.g. 0640", "merge");
    SetOutputFileMode(mode);
  }
  if (args.size() < 2) return Usage("merge needs an output and at least one input trace", "merge");
  for (const std::string& arg : args)
    if (arg.size() > 1 && arg[0] == '-') return Usage("unknown option '" + arg + "' for merge", "merge");
  std::string summary, error;
  if (!MergeTraces(args[0], std::vector<std::string>(args.begin() + 1, args.end()), &summary, &error)) {
    std::fprintf(stderr, "torchprobe: %s\n", error.c_str());
    return 1;
  }
  std::fprintf(stderr, "torchprobe: %s\n", summary.c_str());
  return 0;
}

}  // namespace torchprobe
