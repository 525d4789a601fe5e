#include "userspace/agent/trace_merge.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <set>
#include <string_view>

#include "userspace/agent/window_name.h"
#include "userspace/export/perfetto_writer.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

struct Input {
  std::string path;
  std::string host;  // from the agent's file name; "" otherwise
  std::string rank;  // ditto
  DecodedTrace trace;
  int64_t shift_ns = 0;  // added to its times: onto the merged trace's MONOTONIC axis
};

// Puts every input that carries a wall clock (REALTIME in its snapshot) on
// the MONOTONIC axis of the first such: hosts' monotonic clocks differ by
// their boot times, their wall clocks by their NTP offsets at most. Returns
// how many were aligned; the others keep their times as recorded.
size_t AlignByWallClock(std::vector<std::unique_ptr<Input>>& inputs) {
  const ClockSnapshot* reference = nullptr;
  for (const auto& input : inputs)
    if (input->trace.clock.realtime_ns) {
      reference = &input->trace.clock;
      break;
    }
  if (!reference) return 0;
  // A trace's clocks are its writer's to choose: a difference past int64 is
  // not a host's, and that trace keeps its times.
  auto wall_offset = [](const ClockSnapshot& c, int64_t* offset) {
    return !__builtin_sub_overflow(c.realtime_ns, c.monotonic_ns, offset);
  };
  int64_t reference_offset = 0, offset = 0;
  if (!wall_offset(*reference, &reference_offset)) return 0;
  size_t aligned = 0;
  for (auto& input : inputs) {
    if (!input->trace.clock.realtime_ns || !wall_offset(input->trace.clock, &offset) ||
        __builtin_sub_overflow(offset, reference_offset, &input->shift_ns))
      continue;
    ++aligned;
  }
  return aligned;
}

uint64_t Shifted(uint64_t ns, int64_t shift) {
  __int128 moved = static_cast<__int128>(ns) + shift;
  return moved < 0 ? 0 : moved > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(moved);
}

void NameFromFile(Input* input) {
  std::optional<WindowName> name = ParseWindowName(input->path.substr(input->path.rfind('/') + 1));
  if (name) {
    input->host = name->host;
    input->rank = name->rank;
  }
}

// R of "[rank R]" in a process name (record names a process so when it
// has a RANK), up to 18 digits; "" when none.
std::string RankOf(const Input& input, const DecodedProcess& process) {
  if (!input.rank.empty()) return input.rank;
  constexpr std::string_view kOpen = "[rank ";
  std::string_view name = process.name;
  size_t at = name.find(kOpen);
  if (at == std::string_view::npos) return "";
  std::string_view digits = name.substr(at + kOpen.size());
  size_t end = digits.find(']');
  if (end == 0 || end == std::string_view::npos || end > 18 ||
      digits.substr(0, end).find_first_not_of("0123456789") != std::string_view::npos)
    return "";
  return std::string(digits.substr(0, end));
}

// The rank as a number for the process descriptor; -1 when it is none (a
// RANK that is not a number, or one too large: a name may hold anything).
int64_t RankNumber(const std::string& rank) {
  int64_t value = -1;
  auto [end, error] = std::from_chars(rank.data(), rank.data() + rank.size(), value);
  return error == std::errc() && end == rank.data() + rank.size() && value >= 0 ? value : -1;
}

}  // namespace

bool MergeTraces(const std::string& output, const std::vector<std::string>& paths, std::string* summary,
                 std::string* error) {
  std::vector<std::unique_ptr<Input>> inputs;
  for (const std::string& path : paths) {
    auto input = std::make_unique<Input>();
    input->path = path;
    if (!ReadTrace(path, &input->trace, error)) return false;
    NameFromFile(input.get());
    inputs.push_back(std::move(input));
  }
  size_t aligned = AlignByWallClock(inputs);
  // Oldest first: a thread's slices reach the writer in time order, and the
  // earliest clock snapshot starts every track's incremental clock.
  std::stable_sort(inputs.begin(), inputs.end(), [](const auto& a, const auto& b) {
    return Shifted(a->trace.clock.monotonic_ns, a->shift_ns) < Shifted(b->trace.clock.monotonic_ns, b->shift_ns);
  });

  OpTable ops;
  std::map<std::tuple<std::string, std::string, std::string, std::string>, uint32_t> op_ids;
  std::vector<std::vector<uint32_t>> op_maps;
  for (const auto& input : inputs) {
    std::vector<uint32_t> map;
    for (const OpInfo& op : input->trace.ops) {
      auto key = std::make_tuple(op.name, op.overload, op.schema, op.category);
      auto [it, added] = op_ids.emplace(key, static_cast<uint32_t>(ops.size()));
      if (added) ops.push_back(op);
      map.push_back(it->second);
    }
    op_maps.push_back(std::move(map));
  }

  std::unique_ptr<PerfettoWriter> writer = PerfettoWriter::Open(output, error);
  if (!writer) return false;
  ClockSnapshot start;  // the first input's, on the merged axis (its wall time as it was)
  if (!inputs.empty()) {
    const Input& first = *inputs.front();
    start = first.trace.clock;
    start.boottime_ns = Shifted(start.boottime_ns, first.shift_ns);
    start.monotonic_ns = Shifted(start.monotonic_ns, first.shift_ns);
  }
  writer->Begin(ops, start);

  // (host, pid) -> the pid it has in the merged trace.
  std::map<std::pair<std::string, uint32_t>, uint32_t> pids;
  std::set<uint32_t> used;
  uint32_t next_fresh = 1u << 22;  // above Linux's pid_max
  TraceStats stats;
  std::set<std::string> ranks;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input& input = *inputs[i];
    std::map<uint32_t, uint32_t> pid_of;
    for (const DecodedProcess& process : input.trace.processes) {
      auto key = std::make_pair(input.host, process.pid);
      auto it = pids.find(key);
      if (it == pids.end()) {
        uint32_t pid = used.count(process.pid) ? next_fresh++ : process.pid;
        used.insert(pid);
        it = pids.emplace(key, pid).first;
        std::string rank = RankOf(input, process);
        if (!rank.empty()) ranks.insert(rank);
        ProcessInfo info;
        info.pid = pid;
        info.name = (rank.empty() ? "" : "rank " + rank + " ") + (input.host.empty() ? "" : input.host + " ") +
                    "pid " + std::to_string(process.pid) + ": " + process.name;
        info.cmdline = process.cmdline;
        info.rank = RankNumber(rank);
        writer->AddProcess(info);
      }
      pid_of[process.pid] = it->second;
    }
    for (const DecodedThread& thread : input.trace.threads) {
      auto it = pid_of.find(thread.pid);
      uint32_t pid = it != pid_of.end() ? it->second : thread.pid;
      writer->AddThread(ThreadInfo{pid, thread.tid, thread.name});
      std::vector<Slice> tree;
      for (size_t s = 0; s <= thread.slices.size(); ++s) {
        bool top = s == thread.slices.size() || thread.slices[s].depth == 0;
        if (top && !tree.empty()) {
          writer->AddSliceTree(pid, thread.tid, tree);
          tree.clear();
        }
        if (s == thread.slices.size()) break;
        const DecodedSlice& d = thread.slices[s];
        Slice slice;
        slice.begin_ns = Shifted(d.begin_ns, input.shift_ns);
        slice.end_ns = Shifted(std::max(d.end_ns, d.begin_ns), input.shift_ns);
        slice.op_id = op_maps[i][d.op];
        slice.depth = d.depth;
        slice.flags = static_cast<uint8_t>((d.repaired_begin ? kSliceBeginUnseen : 0) |
                                           (d.repaired_end || !d.ended ? kSliceEndUnseen : 0) |
                                           (d.unwound ? kSliceUnwound : 0));
        tree.push_back(slice);
      }
    }
    // Counts add up; the probes' calibrated per-op costs are the largest seen.
    for (const StatsField& field : kStatsFields) {
      uint64_t value = input.trace.stats.*field.value;
      if (std::string_view(field.name).starts_with("probe_ns"))
        stats.*field.value = std::max(stats.*field.value, value);
      else
        stats.*field.value += value;
    }
    for (const auto& [name, count] : input.trace.stats.sections) stats.Count(name, count.scope) += count.value;
    if (stats.attach_mode.empty()) stats.attach_mode = input.trace.stats.attach_mode;
  }
  if (!writer->Finish(stats, error)) return false;
  *summary = "merged " + std::to_string(inputs.size()) + " traces into " + output + ": " +
             std::to_string(pids.size()) + " processes, " + std::to_string(ranks.size()) + " ranks, " +
             std::to_string(writer->slices_written()) + " slices";
  if (aligned > 1) *summary += ", " + std::to_string(aligned) + " traces lined up by their wall clocks";
  if (aligned && aligned < inputs.size())
    *summary += "; " + std::to_string(inputs.size() - aligned) +
                " without a wall clock (older traces) keep their times, not lined up";
  return true;
}

}  // namespace torchprobe
