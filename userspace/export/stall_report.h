// A flight recorder dump's stall report: per thread of each target, the
// slices open at the dump and for how long, when its last slice closed; the
// last step seen; per process group, the collectives each process entered
// since torchprobe attached. Text for a person, JSON for `report` over the
// dumps of several ranks (report/stall_analysis). Writers know nothing of
// BPF: the session fills this from the dump's model.
#ifndef TORCHPROBE_EXPORT_STALL_REPORT_H
#define TORCHPROBE_EXPORT_STALL_REPORT_H

#include <cstdint>
#include <string>
#include <vector>

namespace torchprobe {

struct StallSlice {
  std::string name;      // op or annotation
  std::string category;  // "" an op, else the OpTable category (user_annotation, autograd, cuda...)
  uint64_t begin_ns = 0;  // CLOCK_MONOTONIC
  std::vector<std::pair<std::string, std::string>> args;  // as the slice carries them, as text
  uint64_t collective_seq = 0;  // a collective: the how-manieth on its group (1-based) since attach; 0 not one
};

struct StallThread {
  uint32_t tid = 0;
  std::string name;
  std::vector<StallSlice> open;  // outermost first
  uint64_t last_closed_end_ns = 0;  // 0: none closed in the dump
  // What the probe sets could tell of it at the dump, (what, text): "state"
  // (--sched: what it waits for), "python" (--python-stacks: its stack now).
  std::vector<std::pair<std::string, std::string>> now;
};

struct StallCollectives {
  std::string group;     // the process group's address, "0x..."
  int64_t rank = -1;
  int64_t group_size = 0;
  uint64_t entered = 0;  // collectives entered on it since torchprobe attached
  uint64_t last_begin_ns = 0;
  std::string last_op;
};

struct StallProcess {
  uint32_t pid = 0;
  int64_t rank = -1;
  std::string name;
  std::string ended;  // "killed by SIGSEGV (core dumped)", "exited 3"; "" alive
  std::vector<StallThread> threads;
  std::vector<StallCollectives> groups;
};

struct StallReport {
  std::string host;
  std::string reason;   // request, stall, signal, end
  std::string detail;   // why, in words
  std::string trace;    // the dump's Perfetto file
  uint64_t dump_ns = 0;       // CLOCK_MONOTONIC of the dump
  uint64_t dump_unix_ns = 0;  // CLOCK_REALTIME of the same moment: lines up hosts
  uint64_t from_ns = 0;       // the oldest event kept
  uint64_t steps_seen = 0;    // step markers since attach
  uint64_t last_step_ns = 0;  // 0: none
  uint64_t median_step_ns = 0;
  uint64_t ring_records = 0, ring_bytes = 0, dropped_for_room = 0;
  std::vector<StallProcess> processes;
};

std::string StallReportText(const StallReport& report);
std::string StallReportJson(const StallReport& report);

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_STALL_REPORT_H
