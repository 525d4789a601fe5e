// The fakes the unit-level suites share: a TraceSink and a GpuSink that
// record what they are handed, a NameSource with fixed names, and the op
// events BPF would send. One copy each; a suite takes the parts it reads.
#ifndef TORCHPROBE_TESTS_FAKES_H
#define TORCHPROBE_TESTS_FAKES_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "bpf/events.h"
#include "userspace/base/op_table.h"
#include "userspace/base/trace_stats.h"
#include "userspace/model/gpu_sink.h"
#include "userspace/model/op_stack_model.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe::test {

// Everything a writer would be handed, kept in the shapes the suites read.
class RecordingSink : public TraceSink {
 public:
  void Begin(const OpTable&, const ClockSnapshot&) override { begun = true; }
  void AddOps(const OpTable& ops) override { known_ops = ops.size(); }
  void AddProcess(const ProcessInfo& process) override { processes.push_back(process); }
  void AddThread(const ThreadInfo& thread) override { threads.push_back(thread); }
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& tree) override {
    trees.push_back(tree);
    for (const Slice& s : tree) {
      slices.emplace_back(tid, s);
      all.push_back(s);
      by_thread[tid].push_back(s);
    }
  }
  bool Finish(const TraceStats& s, std::string*) override {
    stats = s;
    finished = true;
    return true;
  }

  std::vector<ProcessInfo> processes;
  std::vector<ThreadInfo> threads;
  std::vector<std::vector<Slice>> trees;            // as handed over, one a tree
  std::vector<std::pair<uint32_t, Slice>> slices;   // every slice with its thread, trees in order
  std::vector<Slice> all;                           // the same slices alone
  std::map<uint32_t, std::vector<Slice>> by_thread; // by tid, in order
  size_t known_ops = 0;                             // the op table's size at the last AddOps
  TraceStats stats;                                 // at Finish
  bool begun = false, finished = false;
};

// The GPU activities the join hands on, in order.
struct GpuActivities : GpuSink {
  void AddGpuActivity(const GpuActivity& a) override { activities.push_back(a); }
  // The first named `name` (a failure, and the first of all, when none is).
  const GpuActivity& Named(const std::string& name) const {
    auto it = std::find_if(activities.begin(), activities.end(), [&](const GpuActivity& a) { return a.name == name; });
    EXPECT_NE(it, activities.end()) << name;
    return it == activities.end() ? activities.front() : *it;
  }
  size_t Count(const std::string& name) const {
    return std::count_if(activities.begin(), activities.end(), [&](const GpuActivity& a) { return a.name == name; });
  }
  std::vector<GpuActivity> activities;
};

// Every process and thread named alike; `unnamed_tid`'s name is unknown ("").
class FixedNames : public NameSource {
 public:
  FixedNames(std::string process = "python3", std::string cmdline = "python3 train.py", std::string thread = "python3")
      : process_(std::move(process)), cmdline_(std::move(cmdline)), thread_(std::move(thread)) {}
  ProcessInfo Process(uint32_t pid) override {
    ++process_reads;
    return {pid, process_, cmdline_};
  }
  std::string Thread(uint32_t, uint32_t tid) override { return unnamed_tid && tid == unnamed_tid ? "" : thread_; }

  int process_reads = 0;
  uint32_t unnamed_tid = 0;  // 0: none

 private:
  std::string process_, cmdline_, thread_;
};

// Frames: a call at depth d sits at kTop - 64 * d (callers above callees).
inline constexpr uint64_t kTop = 0x7ffc0000;
inline uint64_t Frame(int depth) { return kTop - 64 * static_cast<uint64_t>(depth); }

// An op entry or exit (EV_OP_ENTER, EV_OP_EXIT) as the ops probes send it.
inline tp_op_event OpEvent(uint16_t type, uint32_t pid, uint32_t tid, uint64_t ts, uint32_t op, uint64_t frame) {
  tp_op_event e = {};
  e.hdr = {type, sizeof(e), pid, tid, 0, ts};
  e.op_id = op;
  e.frame = frame;
  return e;
}

}  // namespace torchprobe::test

#endif  // TORCHPROBE_TESTS_FAKES_H
