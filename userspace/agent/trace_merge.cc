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
};

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
  // Oldest first: a thread's slices reach the writer in time order, and the
  // earliest clock snapshot starts every track's incremental clock.
  std::stable_sort(inputs.begin(), inputs.end(), [](const auto& a, const auto& b) {
    return a->trace.clock.monotonic_ns < b->trace.clock.monotonic_ns;
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
  writer->Begin(ops, inputs.empty() ? ClockSnapshot{} : inputs.front()->trace.clock);

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
        slice.begin_ns = d.begin_ns;
        slice.end_ns = std::max(d.end_ns, d.begin_ns);
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
  return true;
}

}  // namespace torchprobe
