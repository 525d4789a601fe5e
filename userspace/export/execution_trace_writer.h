// Streams the trace model as PyTorch's execution trace JSON (what
// ExecutionTraceObserver writes; FORMATS.md section 2), schema
// "1.1.1-chakra.0.0.4", for Chakra, PARAM replay and HTA's ET correlation.
//
// Node ids come from one counter starting at 2: a thread node
// ([pytorch|profiler|execution_trace|thread], ctrl_deps 1) when a thread is
// described, then each slice in the model's pre-order, so a parent's id is
// below its children's. Like the observer, nodes are written when they end
// (children before parents) and the process node (id 1) last. Every slice
// gets rf_id = its 1-based position in the order slices reach the writer:
// ChromeTraceWriter numbers the same slices the same way, which is what lets
// trace linkers join the two files. With --shapes an op's inputs carry its
// arguments (export/json_inputs.h), else they are empty; outputs are always
// empty, seq_id the thread's sequence number at entry (--shapes, else -1),
// fw_parent 0. The TraceStats go into a
// top-level "torchprobe_stats" object. Everything streams through an
// AtomicFile: the file appears complete on Finish, or not at all.
#ifndef TORCHPROBE_EXPORT_EXECUTION_TRACE_WRITER_H
#define TORCHPROBE_EXPORT_EXECUTION_TRACE_WRITER_H

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "userspace/export/json_trace_file.h"
#include "userspace/export/slice_category.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

class ExecutionTraceWriter : public TraceSink {
 public:
  static constexpr const char* kSchema = "1.1.1-chakra.0.0.4";
  static constexpr const char* kProcessNode = "[pytorch|profiler|execution_trace|process]";
  static constexpr const char* kThreadNode = "[pytorch|profiler|execution_trace|thread]";

  // Creates the temp file now; nullptr and a one-line *error when that fails.
  static std::unique_ptr<ExecutionTraceWriter> Open(const std::string& path, std::string* error);

  void Begin(const OpTable& ops, const ClockSnapshot& clock) override;
  void AddOps(const OpTable& ops) override { ops_ = ops; }
  void AddProcess(const ProcessInfo& process) override;
  void AddThread(const ThreadInfo& thread) override;
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override;
  bool Finish(const TraceStats& stats, std::string* error) override;

  uint64_t bytes_written() const { return out_.bytes_written(); }

 private:
  struct OpenNode {
    uint64_t id;
    uint64_t parent;
    uint64_t rf_id;
    uint32_t op_id;
    uint16_t depth;
    const OpInputs* inputs;  // the slice's (--shapes), null if not read
    SliceCategory category;  // of its op's name (written as a node when a RecordFunction)
  };
  explicit ExecutionTraceWriter(std::unique_ptr<AtomicFile> file) : out_(std::move(file)), text_(out_.text()) {}
  uint64_t ThreadNode(uint32_t pid, uint32_t tid);
  void WriteNode(uint64_t id, const std::string& name, uint64_t parent, uint64_t rf_id,
                 uint64_t scope, uint64_t tid, const std::string& schema,
                 const OpInputs* inputs = nullptr);

  JsonTraceFile out_;
  JsonText& text_;  // out_.text()
  OpTable ops_;
  ClockSnapshot clock_;
  std::string wall_time_;  // local time at Begin, "%Y-%m-%d %X"
  uint32_t first_pid_ = 0;
  bool first_node_ = true;
  uint64_t next_id_ = 2;
  uint64_t next_rf_id_ = 1;
  uint64_t end_ns_ = 0;
  struct ThreadNodeInfo {
    uint64_t node_id;
    uint64_t small_tid;  // 1, 2, ... in order of appearance, as the observer numbers them
  };
  std::unordered_map<uint64_t, ThreadNodeInfo> threads_;  // (pid << 32 | tid)
  std::vector<OpenNode> stack_;  // scratch for AddSliceTree
};

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_EXECUTION_TRACE_WRITER_H
