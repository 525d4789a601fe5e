// The Python stacks probe set (--python-stacks): the op and range entries
// of every other set walk the thread's Python frames in BPF
// (bpf/python_stack.bpf.h) by the layout of the process' CPython
// (discover/python_runtime), sending a stack only when it changed; this set
// decodes each (code objects read from the process, lines from their line
// tables), gives it to the model for the entries that follow on the thread,
// and turns stacks into frame slices around the ops (model/python_frames).
// A process whose CPython it cannot read is said once and traced without
// stacks.
#ifndef TORCHPROBE_PROBE_SETS_PYTHON_PYTHON_PROBE_SET_H
#define TORCHPROBE_PROBE_SETS_PYTHON_PYTHON_PROBE_SET_H

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "userspace/model/python_frames.h"
#include "userspace/probe_sets/probe_set.h"
#include "userspace/probe_sets/python/code_objects.h"

namespace torchprobe {

class PythonProbeSet : public ProbeSet {
 public:
  PythonProbeSet(OpTable* ops, bool quiet) : ops_(ops), quiet_(quiet) {}
  void Configure(BpfConfig& config) const override { config.python_stacks = true; }
  Status Attach(const TracedProcess& process) override;
  void Release(uint32_t pid) override;
  void ThreadExited(uint32_t pid, uint32_t tid) override;
  void Route(EventRouter& router) override;
  TraceSink* DecorateSlices(TraceSink* next) override;
  void Wire(const ModelWiring& wiring) override;
  void FillStats(TraceStats& stats) override;
  // The thread's Python stack now, read from the process (its thread state
  // as the BPF walk found it): ("python", "FILE(LINE): FUNCTION <- ...").
  void ThreadNow(uint32_t pid, uint32_t tid, uint64_t now_ns,
                 std::vector<std::pair<std::string, std::string>>& notes) override;
  std::string Summary(const TraceStats& stats) const override;

 private:
  struct Process {
    std::unique_ptr<CodeObjects> code;
    tp_py_layout layout{};
    // Each distinct stack once, by its frames (code address and code unit).
    std::map<std::vector<std::pair<uint64_t, int32_t>>, std::shared_ptr<const PythonStack>> stacks;
  };
  void OnStack(const void* record, size_t size);

  OpTable* ops_;
  bool quiet_;
  OpStackModel* model_ = nullptr;
  std::unique_ptr<PythonFrames> frame_slices_;
  std::map<uint32_t, Process> processes_;
  std::map<uint32_t, std::string> unsupported_;  // pid -> why (said once)
  std::set<uint32_t> attached_;
  // Counts of this window (FillStats), and of the run.
  uint64_t stacks_ = 0, empty_ = 0, truncated_ = 0, frames_ = 0, unresolved_ = 0;
  uint64_t run_stacks_ = 0, run_unresolved_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_PYTHON_PYTHON_PROBE_SET_H
