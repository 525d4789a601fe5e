// torchprobe's command line: parsing and wiring only.
//
//   torchprobe record [OPTIONS] --pid PID[,PID...] | -- COMMAND [ARGS...]
//   torchprobe report [OPTIONS] FILE
//   torchprobe --version
//
// Exit codes: 0 success, 1 runtime error, 2 usage error; in launch mode the
// command's own status (126/127 when it cannot be run, as `env` and `time`).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "userspace/agent/agent_cli.h"
#include "userspace/base/atomic_file.h"
#include "userspace/cli_args.h"
#include "userspace/report/report.h"
#include "userspace/report/stall_analysis.h"
#include "userspace/session/flight_options.h"
#include "userspace/session/record_session.h"
#include "userspace/session/target_launcher.h"

namespace torchprobe {
namespace {

constexpr int kUsageError = 2;

const char kUsage[] =
    "usage: torchprobe record [OPTIONS] --pid PID[,PID...]   attach to running processes\n"
    "       torchprobe record [OPTIONS] -- COMMAND [ARGS...]  launch COMMAND and trace it\n"
    "       torchprobe report [OPTIONS] TRACE                 summarize a trace\n"
    "       torchprobe agent -o DIR [OPTIONS]                 sample every PyTorch process, always on\n"
    "       torchprobe trigger --pid PID [--duration SECS]    ask the agent for a window now\n"
    "       torchprobe merge OUT.pftrace IN.pftrace...        several ranks' traces in one\n"
    "       torchprobe --version\n"
    "\n"
    "'torchprobe COMMAND --help' lists a command's options.\n"
    "Exit codes: 0 success, 1 runtime error, 2 usage error; a launched command's\n"
    "own exit status when it ran (126/127: it could not be run).\n";

const char kRecordUsage[] =
    "usage: torchprobe record [OPTIONS] --pid PID[,PID...]\n"
    "       torchprobe record [OPTIONS] -- COMMAND [ARGS...]\n"
    "\n"
    "Traces every ATen operator of the processes, with no change to them, into a\n"
    "Perfetto trace (open it at ui.perfetto.dev). Runs as root.\n"
    "\n"
    "  -p, --pid PIDS       attach to running processes (comma-separated), their\n"
    "                       PyTorch child processes too (DataLoader workers, ...)\n"
    "      --wait           with --pid: a process that has not loaded PyTorch yet\n"
    "                       is attached as soon as it does\n"
    "      --no-children    trace only the given processes (or the launched command),\n"
    "                       not the processes they fork\n"
    "      --no-hold-children  do not stop a forked child at its fork until it is\n"
    "                       attached (its first moments then go untraced, counted)\n"
    "  -o, --output FILE    Perfetto trace to write (default torchprobe.pftrace, unless\n"
    "                       only --et or --chrome is given)\n"
    "      --et FILE        also write PyTorch's execution trace JSON (Chakra, PARAM)\n"
    "      --chrome FILE    also write Kineto-style Chrome trace JSON (HTA,\n"
    "                       chrome://tracing); all outputs come from the same events\n"
    "      --mode MODE      the output files' mode (default 0600: they hold the\n"
    "                       processes' command lines), e.g. 0640 or 0644\n"
    "  -d, --duration SECS  stop tracing after SECS seconds (default: Ctrl-C, or the\n"
    "                       targets exit). A launched command is not stopped: it runs\n"
    "                       on untraced, and torchprobe waits for it and exits with\n"
    "                       its status, as `time` does\n"
    "      --start-after SECS  capture nothing for SECS seconds after tracing starts\n"
    "      --window SECS   capture in windows of SECS seconds (back to back, or one\n"
    "      --every SECS    every SECS seconds), one set of files per window:\n"
    "                       OUT.N.ext; SIGUSR1 toggles capture on and off (a window\n"
    "                       it opens gets the next number)\n"
    "      --steps N        capture N training steps (ProfilerStep#, see --step-marker)\n"
    "      --skip-steps K   after skipping K, as torch.profiler's schedule does; each\n"
    "      --every-steps M  window is exactly whole steps. With --every-steps, again\n"
    "                       every M steps (OUT.N.ext per window) until stopped; without,\n"
    "                       tracing stops after the window (SIGUSR1 is ignored)\n"
    "      --attach MODE    auto (default), multi (uprobe_multi links only), uprobe\n"
    "                       (one uprobe per symbol: kernels before 6.6)\n"
    "      --returns MODE   how op returns are seen: auto (default: uretprobe where\n"
    "                       it can be, else ret), uretprobe (a return probe; torchprobe\n"
    "                       ptraces the target to give return addresses back before\n"
    "                       each C++ exception), ret (a uprobe on every `ret`: ~10x\n"
    "                       the cost, needs no ptrace)\n"
    "      --compress       deflate the trace's packets (Perfetto's compressed_packets, which\n"
    "                       the UI and trace_processor read): ~6x smaller\n"
    "      --ring-mb N      op ring buffer size in MiB, a power of 2 up to 2048\n"
    "                       (default 64)\n"
    "      --memory         also every CPU allocation and free (libc10's allocator),\n"
    "                       each joined to the op that made it: a memory counter per\n"
    "                       process, and peak and leak candidates in `report`\n"
    "      --memory-timeline FILE  with --memory: also FILE.json, PyTorch's memory\n"
    "                       timeline rows [time_ns, action, [id, version], bytes], or\n"
    "                       FILE.html, a page with a stacked plot by allocating op\n"
    "      --memory-snapshot FILE.pickle  with --memory: also the CUDA caching allocator's\n"
    "                       history as torch.cuda.memory._snapshot() pickles it (blocks,\n"
    "                       segments, trace entries), for pytorch.org/memory_viz\n"
    "      --shapes         also each op's Tensor arguments (the first 4, up to 6 dims):\n"
    "                       sizes, strides, dtype, storage offset, read at its entry,\n"
    "                       as torch.profiler's record_shapes=True writes them; with\n"
    "                       --memory, each allocation's category too (PARAMETER,\n"
    "                       GRADIENT, OPTIMIZER_STATE, INPUT, ACTIVATION, ...)\n"
    "      --python-stacks  also the Python stack each op was called from (CPython 3.11,\n"
    "                       3.13), read from the interpreter's frames: frames as\n"
    "                       python_function slices around the ops, as with_stack=True\n"
    "      --sched          also why each traced thread was off its CPU: preempted,\n"
    "                       blocked (in which system call) or waiting for the GIL,\n"
    "                       on a thread-state track beside its ops (Perfetto only)\n"
    "      --cupti          with -- COMMAND: also what ran on the GPU (CUPTI): the\n"
    "                       CUDA driver loads torchprobe's collector into the command\n"
    "                       (CUDA_INJECTION64_PATH): kernels, copies and fills on a\n"
    "                       track per GPU and stream, with flows from their launches\n"
    "      --inject-cupti   with --pid: the same for a process already running, by\n"
    "                       loading the collector into it. Opt-in, as it writes to\n"
    "                       the target: torchprobe ptraces it, borrows a thread at\n"
    "                       its next CUDA launch (within 3 s, else CPU side only),\n"
    "                       calls dlopen there and puts its registers back; the\n"
    "                       collector stays loaded, idle once torchprobe is gone\n"
    "      --step-marker NAME  the annotation or op that ends a training step, for\n"
    "                       the ProfilerStep#N slices (default: the optimizer's\n"
    "                       step, 'Optimizer.step#*'; a final * matches a prefix)\n"
    "      --flight-recorder SECS  write nothing until something goes wrong: keep the\n"
    "                       last SECS seconds of events in memory and write them\n"
    "                       (OUT.HOST-PID[-rankR]-REASON-TIME.ext, and a stall report\n"
    "                       .stall.txt/.stall.json beside) on SIGUSR2, at a stall, or\n"
    "                       when a traced process dies by a signal; recording goes on\n"
    "      --flight-bytes N  the memory that keeps them (default 256M; K, M, G):\n"
    "                       the oldest events make room, counted\n"
    "      --flight-tier T  full (default: every probe of record) or light: only step\n"
    "                       boundaries, c10d collectives, CUDA synchronizations and\n"
    "                       NCCL calls, cheap enough to stay on\n"
    "      --stall-after SECS  a stall: a traced process with steps goes this long\n"
    "      --stall-factor K    and K times its median step without a step boundary\n"
    "                       (defaults 60 s and 10)\n"
    "  -q, --quiet          no status line, no summary\n"
    "  -h, --help           this help\n";

const char kReportUsage[] =
    "usage: torchprobe report [OPTIONS] TRACE\n"
    "\n"
    "Prints what torch.profiler's key_averages().table() prints for the trace: ops\n"
    "grouped by name, sorted by self time; then what the trace could not see.\n"
    "TRACE is any of record's outputs: Perfetto, --chrome JSON, or --et JSON (which\n"
    "holds no times: calls and nesting only).\n"
    "\n"
    "       torchprobe report A.stall.json [B.stall.json ...]\n"
    "\n"
    "With flight recorder stall reports (several ranks' dumps): which rank never\n"
    "entered the collective the others wait in, and what each was doing.\n"
    "\n"
    "  -n, --top N          rows in the table (default 30)\n"
    "      --per-process    one table per traced process\n"
    "      --group-by-input-shape  a row per op and input shapes, as\n"
    "                       key_averages(group_by_input_shape=True) (a --shapes trace)\n"
    "      --by-line        also op time by the Python line the ops were called from\n"
    "                       (a trace recorded with --python-stacks)\n"
    "      --folded         print folded stacks only (Python frames, ranges and ops;\n"
    "                       each op's self time in ns): flamegraph.pl, speedscope\n"
    "  -h, --help           this help\n";

int Usage(const std::string& message, const char* command = nullptr) {
  std::fprintf(stderr, "torchprobe: %s\n", message.c_str());
  std::fprintf(stderr, "Try 'torchprobe %s--help'.\n", command ? (std::string(command) + " ").c_str() : "");
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

// Comma-separated pids, each once in the order given.
bool ParsePids(const std::string& value, std::vector<uint32_t>* pids, std::string* bad) {
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    std::string text = value.substr(start, end - start);
    unsigned long pid;
    if (!ParseUnsigned(text, 0x3fffffff, &pid)) {
      *bad = text;
      return false;
    }
    if (std::find(pids->begin(), pids->end(), pid) == pids->end())
      pids->push_back(static_cast<uint32_t>(pid));
    start = end + 1;
  }
  return true;
}

int Record(const std::vector<std::string>& args) {
  RecordOptions options;
  bool output_given = false;
  bool steps_given = false;  // any of --steps, --skip-steps, --every-steps
  bool flight_tuned = false;  // any of --flight-bytes, --stall-after, --stall-factor
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::string value;
    bool missing = false;
    if (arg == "--") {
      options.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      if (options.command.empty()) return Usage("'--' must be followed by a command", "record");
      break;
    } else if (IsHelp(arg)) {
      std::fputs(kRecordUsage, stdout);
      return 0;
    } else if (TakeValue(args, &i, "--pid", "-p", &value, &missing)) {
      if (missing) return Usage("--pid needs a value", "record");
      std::string bad;
      if (!ParsePids(value, &options.pids, &bad))
        return Usage("invalid pid '" + bad + "': not a positive number", "record");
    } else if (TakeValue(args, &i, "--output", "-o", &value, &missing)) {
      if (missing || value.empty()) return Usage("--output needs a file name", "record");
      options.output = value;
      output_given = true;
    } else if (TakeValue(args, &i, "--et", nullptr, &value, &missing)) {
      if (missing || value.empty()) return Usage("--et needs a file name", "record");
      options.et_output = value;
    } else if (TakeValue(args, &i, "--chrome", nullptr, &value, &missing)) {
      if (missing || value.empty()) return Usage("--chrome needs a file name", "record");
      options.chrome_output = value;
    } else if (TakeValue(args, &i, "--duration", "-d", &value, &missing)) {
      char* end = nullptr;
      options.duration_s = missing ? 0 : std::strtod(value.c_str(), &end);
      if (missing || end == value.c_str() || *end || options.duration_s <= 0)
        return Usage("invalid --duration '" + value + "': expected seconds > 0", "record");
    } else if (TakeValue(args, &i, "--start-after", nullptr, &value, &missing) ||
               TakeValue(args, &i, "--window", nullptr, &value, &missing) ||
               TakeValue(args, &i, "--every", nullptr, &value, &missing)) {
      std::string flag = arg.substr(0, arg.find('='));
      char* end = nullptr;
      double seconds = missing ? 0 : std::strtod(value.c_str(), &end);
      if (missing || end == value.c_str() || *end || seconds < 0 || (flag != "--start-after" && seconds == 0))
        return Usage("invalid " + flag + " '" + value + "': expected seconds" +
                         (flag == "--start-after" ? " >= 0" : " > 0"), "record");
      (flag == "--start-after" ? options.windows.start_after_s
       : flag == "--window"    ? options.windows.window_s
                               : options.windows.every_s) = seconds;
    } else if (TakeValue(args, &i, "--steps", nullptr, &value, &missing) ||
               TakeValue(args, &i, "--skip-steps", nullptr, &value, &missing) ||
               TakeValue(args, &i, "--every-steps", nullptr, &value, &missing)) {
      std::string flag = arg.substr(0, arg.find('='));
      unsigned long steps = 0;
      bool number = !missing && (value == "0" || ParseUnsigned(value, 1ul << 40, &steps));  // it refuses 0
      if (!number || (flag != "--skip-steps" && steps == 0))
        return Usage("invalid " + flag + " '" + value + "': expected a number of steps" +
                         (flag == "--skip-steps" ? " >= 0" : " > 0"), "record");
      (flag == "--steps"        ? options.windows.steps
       : flag == "--skip-steps" ? options.windows.skip_steps
                                : options.windows.every_steps) = steps;
      steps_given = true;
    } else if (TakeValue(args, &i, "--attach", nullptr, &value, &missing)) {
      if (missing || (value != "auto" && value != "multi" && value != "uprobe"))
        return Usage("invalid --attach '" + value + "': expected auto, multi or uprobe", "record");
      options.attach = value;
    } else if (TakeValue(args, &i, "--returns", nullptr, &value, &missing)) {
      if (missing || (value != "auto" && value != "uretprobe" && value != "ret"))
        return Usage("invalid --returns '" + value + "': expected auto, uretprobe or ret", "record");
      options.returns = value;
    } else if (TakeValue(args, &i, "--ring-mb", nullptr, &value, &missing)) {
      unsigned long mb;
      if (missing || !ParseUnsigned(value, kMaxRingMb, &mb) || (mb & (mb - 1)))
        return Usage("invalid --ring-mb '" + value + "': expected a power of 2 up to " +
                     std::to_string(kMaxRingMb) + " (BPF's largest ring buffer)", "record");
      options.ring_mb = static_cast<uint32_t>(mb);
    } else if (arg == "--compress") {
      options.compress = true;
    } else if (TakeValue(args, &i, "--memory-timeline", nullptr, &value, &missing)) {
      // An option where the name should be ("--memory-timeline -o t.pftrace"): the name was left out.
      if (missing || value.empty() || value[0] == '-')
        return Usage("--memory-timeline needs a file name (.json or .html)", "record");
      options.memory_timeline = value;
      options.memory = true;
    } else if (TakeValue(args, &i, "--memory-snapshot", nullptr, &value, &missing)) {
      if (missing || value.empty() || value[0] == '-')
        return Usage("--memory-snapshot needs a file name (.pickle)", "record");
      options.memory_snapshot = value;
      options.memory = true;
    } else if (arg == "--memory") {
      options.memory = true;
    } else if (arg == "--shapes") {
      options.shapes = true;
    } else if (arg == "--python-stacks") {
      options.python_stacks = true;
    } else if (arg == "--sched") {
      options.sched = true;
    } else if (arg == "--cupti") {
      options.cupti = true;
    } else if (arg == "--inject-cupti") {
      options.cupti = options.inject_cupti = true;
    } else if (TakeValue(args, &i, "--step-marker", nullptr, &value, &missing)) {
      if (missing || value.empty() || value == "*")
        return Usage("--step-marker needs an annotation or op name", "record");
      options.step_marker = value;
    } else if (FlightArg flight = TakeFlightOption(args, &i, 1e7, &options.flight, &value);
               flight != FlightArg::kNone) {
      if (flight == FlightArg::kBad) return Usage(value, "record");
      flight_tuned |= flight == FlightArg::kTuned;
    } else if (arg == "--wait") {
      options.wait = true;
    } else if (arg == "--no-children") {
      options.follow_children = false;
    } else if (arg == "--no-hold-children") {
      options.hold_children = false;
    } else if (arg == "--empty-probes") {  // bench: the cost floor
      options.empty_probes = true;
    } else if (arg == "--empty-probes=uretprobe") {  // bench: the uretprobe floor
      options.empty_probes = options.empty_uretprobes = true;
    } else if (arg == "-q" || arg == "--quiet") {
      options.quiet = true;
    } else if (TakeValue(args, &i, "--mode", nullptr, &value, &missing)) {
      mode_t mode = 0;
      if (missing || !ParseFileMode(value, &mode))
        return Usage("invalid --mode '" + value + "': expected octal read/write bits with 0600, e.g. 0640", "record");
      SetOutputFileMode(mode);
    } else {
      return Usage("unknown option '" + arg + "' for record", "record");
    }
  }
  if (!output_given && options.et_output.empty() && options.chrome_output.empty())
    options.output = "torchprobe.pftrace";
  if (options.windows.every_s > 0 && options.windows.window_s == 0)
    return Usage("--every goes with --window: the length of each window", "record");
  if (options.windows.every_s > 0 && options.windows.every_s < options.windows.window_s)
    return Usage("--every must be at least --window", "record");
  if (steps_given && options.windows.steps == 0)
    return Usage("--skip-steps and --every-steps go with --steps: the steps each window captures", "record");
  if (options.windows.every_steps > 0 && options.windows.every_steps < options.windows.steps)
    return Usage("--every-steps must be at least --steps", "record");
  if (options.windows.steps > 0 && options.windows.window_s > 0)
    return Usage("--steps and --window: windows are counted in steps or in seconds, not both", "record");
  if (options.windows.steps > 0 && options.sched) return Usage("--steps does not go with --sched yet", "record");
  if (options.duration_s > 0 && options.windows.start_after_s >= options.duration_s)
    return Usage("--duration counts from when tracing starts: it must be longer than --start-after", "record");
  if (flight_tuned && options.flight.seconds == 0)
    return Usage("--flight-bytes, --flight-tier, --stall-after and --stall-factor go with --flight-recorder SECS",
                 "record");
  if (options.flight.light && (options.memory || options.shapes))
    return Usage("--flight-tier light probes steps, collectives and CUDA waits only: not with --memory or --shapes",
                 "record");
  if (options.flight.seconds > 0 && (options.windows.window_s > 0 || options.windows.start_after_s > 0 ||
                                     options.windows.steps > 0))
    return Usage("--flight-recorder writes only when something goes wrong: not with --window, --start-after or "
                 "--steps (the agent runs both)", "record");
  if (options.flight.seconds > 0 &&
      (options.cupti || !options.memory_timeline.empty() || !options.memory_snapshot.empty()))
    return Usage("--flight-recorder does not keep --cupti's GPU records, a --memory-timeline or a --memory-snapshot yet",
                 "record");
  if (options.pids.empty() && options.command.empty())
    return Usage("record needs --pid PID or -- COMMAND", "record");
  if (!options.pids.empty() && !options.command.empty())
    return Usage("record takes --pid or a command, not both", "record");
  if (options.inject_cupti && options.pids.empty())
    return Usage("--inject-cupti goes with --pid (a launched command gets --cupti)", "record");
  if (options.cupti && options.command.empty() && !options.inject_cupti)
    return Usage("--cupti goes with a launched command (-- COMMAND): the CUDA driver loads the "
                 "collector at its start; for a running process, --inject-cupti loads it there", "record");
  if (options.wait && options.pids.empty())
    return Usage("--wait goes with --pid: a launched command is traced from its start", "record");
  if (!options.command.empty()) {
    // The command line is fine; the command cannot run. As `env` and `time`
    // do: 127 when it is not found, 126 when it cannot be executed.
    int exit_code = 0;
    StatusOr<std::string> resolved = ResolveCommand(options.command[0], &exit_code);
    if (!resolved.ok()) {
      std::fprintf(stderr, "torchprobe: %s\n", resolved.status().message().c_str());
      return exit_code;
    }
  }
  return RunRecord(options);
}

int ReportCommand(const std::vector<std::string>& args) {
  std::string path;
  std::vector<std::string> stalls;  // flight recorder stall reports, read together
  ReportOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string value;
    bool missing = false;
    if (IsHelp(args[i])) {
      std::fputs(kReportUsage, stdout);
      return 0;
    } else if (TakeValue(args, &i, "--top", "-n", &value, &missing)) {
      unsigned long n;
      if (missing || !ParseUnsigned(value, 1000000, &n))
        return Usage("invalid --top '" + value + "': expected a positive number", "report");
      options.top = n;
    } else if (args[i] == "--per-process") {
      options.per_process = true;
    } else if (args[i] == "--by-line") {
      options.by_line = true;
    } else if (args[i] == "--group-by-input-shape") {
      options.by_input_shape = true;
    } else if (args[i] == "--folded") {
      options.folded = true;
    } else if (args[i].size() > 1 && args[i][0] == '-') {
      return Usage("unknown option '" + args[i] + "' for report", "report");
    } else if (IsStallReport(args[i])) {
      stalls.push_back(args[i]);
    } else if (path.empty()) {
      path = args[i];
    } else {
      return Usage("report takes one trace file (or several .stall.json reports)", "report");
    }
  }
  std::string error;
  if (!stalls.empty()) {
    if (!path.empty()) return Usage("report takes a trace or .stall.json reports, not both", "report");
    std::string text;
    if (!AnalyzeStalls(stalls, &text, &error)) {
      std::fprintf(stderr, "torchprobe: %s\n", error.c_str());
      return 1;
    }
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  if (path.empty()) return Usage("report needs a trace file", "report");
  if (!Report(path, options, std::cout, &error)) {
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
  if (command == "-V" || command == "--version") {
    std::printf("torchprobe %s\n", TORCHPROBE_VERSION);
    return 0;
  }
  if (command == "help" && !args.empty()) {  // `torchprobe help record`
    command = args[0];
    args = {"--help"};
  }
  if (torchprobe::IsHelp(command) || command == "help") {
    std::fputs(torchprobe::kUsage, stdout);
    return 0;
  }
  if (command == "record") return torchprobe::Record(args);
  if (command == "report") return torchprobe::ReportCommand(args);
  if (command == "agent") return torchprobe::AgentCommand(args);
  if (command == "trigger") return torchprobe::TriggerCommand(args);
  if (command == "merge") return torchprobe::MergeCommand(args);
  return torchprobe::Usage("unknown command '" + command + "'");
}
