#include "userspace/export/execution_trace_writer.h"

#include <ctime>

#include "userspace/export/json_inputs.h"
#include "userspace/export/json_stats.h"
#include "userspace/export/slice_category.h"

namespace torchprobe {

namespace {

constexpr const char* kEmptyValues = R"({"values": [], "shapes": [], "types": [], "strides": []})";

std::string LocalWallTime() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %X", &tm);
  return buf;
}

}  // namespace

std::unique_ptr<ExecutionTraceWriter> ExecutionTraceWriter::Open(const std::string& path,
                                                                 std::string* error) {
  std::unique_ptr<AtomicFile> file = AtomicFile::Open(path, error);
  if (!file) return nullptr;
  return std::unique_ptr<ExecutionTraceWriter>(new ExecutionTraceWriter(std::move(file)));
}

void ExecutionTraceWriter::Begin(const OpTable& ops, const ClockSnapshot& clock) {
  ops_ = ops;
  clock_ = clock;
  end_ns_ = clock.monotonic_ns;
  wall_time_ = LocalWallTime();
  text_.Raw("{").Key("schema").String(kSchema).Raw(",\n").Key("nodes").Raw("[\n");
}

void ExecutionTraceWriter::AddProcess(const ProcessInfo& process) {
  if (first_pid_ == 0) first_pid_ = process.pid;
}

void ExecutionTraceWriter::AddThread(const ThreadInfo& thread) { ThreadNode(thread.pid, thread.tid); }

uint64_t ExecutionTraceWriter::ThreadNode(uint32_t pid, uint32_t tid) {
  uint64_t key = static_cast<uint64_t>(pid) << 32 | tid;
  auto it = threads_.find(key);
  if (it != threads_.end()) return it->second.node_id;
  ThreadNodeInfo info{next_id_++, threads_.size() + 1};
  threads_.emplace(key, info);
  WriteNode(info.node_id, kThreadNode, 1, 0, 7, info.small_tid, "");
  return info.node_id;
}

void ExecutionTraceWriter::AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) {
  uint64_t thread_node = ThreadNode(pid, tid);
  uint64_t small_tid = threads_[static_cast<uint64_t>(pid) << 32 | tid].small_tid;
  auto write_top = [&] {
    const OpenNode& n = stack_.back();
    const OpInfo& op = ops_[n.op_id];
    if (n.category.record_function)
      WriteNode(n.id, op.name, n.parent, n.rf_id, n.category.et_scope, small_tid, op.schema, n.inputs);
    stack_.pop_back();
  };
  stack_.clear();
  for (const Slice& s : slices) {
    // A slice at depth d ends every open one at depth >= d: the tree is in
    // pre-order, so those have no children left.
    while (!stack_.empty() && stack_.back().depth >= s.depth) write_top();
    uint64_t parent = stack_.empty() ? thread_node : stack_.back().id;
    SliceCategory category = CategoryOf(ops_[s.op_id].name);
    if (category.python_frame) {
      // No node: what it encloses hangs from its parent (write_top skips it).
      stack_.push_back({parent, parent, 0, s.op_id, s.depth, nullptr, category});
      continue;
    }
    stack_.push_back({next_id_++, parent, next_rf_id_++, s.op_id, s.depth, s.inputs.get(), category});
    if (s.end_ns > end_ns_) end_ns_ = s.end_ns;
  }
  while (!stack_.empty()) write_top();
}

void ExecutionTraceWriter::WriteNode(uint64_t id, const std::string& name, uint64_t parent,
                                     uint64_t rf_id, uint64_t scope, uint64_t tid,
                                     const std::string& schema, const OpInputs* inputs) {
  if (!first_node_) text_.Raw(",\n");
  first_node_ = false;
  text_.Raw("{").Key("id").UInt(id).Raw(", ").Key("name").String(name).Raw(", ");
  text_.Key("ctrl_deps").UInt(parent).Raw(", ");
  text_.Key("inputs");
  AppendEtInputs(text_, inputs);
  text_.Raw(", ").Key("outputs").Raw(kEmptyValues).Raw(", ");
  text_.Key("attrs").Raw("[");
  auto attr = [&](const char* key, const char* type) -> JsonText& {
    if (key[0] != 'r') text_.Raw(", ");  // every attr but the first, rf_id
    return text_.Raw("{").Key("name").String(key).Raw(", ").Key("type").String(type).Raw(", ").Key("value");
  };
  attr("rf_id", "uint64").UInt(rf_id).Raw("}");
  attr("fw_parent", "uint64").UInt(0).Raw("}");
  attr("seq_id", "int64").Int(inputs ? inputs->sequence_number : -1).Raw("}");
  attr("scope", "uint64").UInt(scope).Raw("}");
  attr("tid", "uint64").UInt(tid).Raw("}");
  attr("fw_tid", "uint64").UInt(0).Raw("}");
  attr("op_schema", "string").String(schema).Raw("}");
  attr("kernel_backend", "string").String("").Raw("}");
  attr("kernel_file", "string").String("").Raw("}");
  text_.Raw("]}");
  out_.MaybeFlush();
}

bool ExecutionTraceWriter::Finish(const TraceStats& stats, std::string* error) {
  std::string ignored;
  if (!error) error = &ignored;
  if (!out_.StartFinish(error)) return false;
  WriteNode(1, kProcessNode, 1, 0, 7, 0, "");
  text_.Raw("\n],\n").Key("pid").UInt(first_pid_).Raw(", ").Key("time").String(wall_time_).Raw(", ");
  // Steady-clock milliseconds, as the observer writes them.
  text_.Key("start_ts").UInt(clock_.monotonic_ns / 1'000'000).Raw(", ");
  text_.Key("finish_ts").UInt(end_ns_ / 1'000'000).Raw(",\n");
  AppendStats(text_, stats);
  text_.Raw("}\n");
  return out_.Commit(error);
}

}  // namespace torchprobe
