// Autograd engine entries -> `autograd::engine::evaluate_function: NODE`
// slices.
//
// Engine::evaluate_function is probed like an op (its returns come back
// under its own op id), and its entry carries the vtable pointer of the node
// it runs (discover/autograd_probes.h). This component sits in front of the
// rest of the op event path, as BoxedModel does for boxed calls: the entry
// opens a slice named after the node (an op table entry added per name, the
// first time it is seen), and the function's return closes it. A node whose
// vtable cannot be named keeps the probe's own name (kUnnamedNode), counted
// as autograd_nodes_unnamed. A Python Function's node (PyNode) is named
// after its Python class, read from the target (discover/py_node.h), and so
// is the PyNode::apply it runs (the inner range); one whose class cannot be
// read keeps torch::autograd::PyNode, counted as autograd_python_nodes.
#ifndef TORCHPROBE_MODEL_AUTOGRAD_MODEL_H
#define TORCHPROBE_MODEL_AUTOGRAD_MODEL_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bpf/events.h"
#include "userspace/base/op_table.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

class AutogradModel {
 public:
  // The demangled symbol at `address` in `pid` ("" when none).
  using SymbolAt = std::function<std::string(uint32_t pid, uint64_t address)>;
  // The name of the Python type object at `address` in `pid` (nullopt when
  // it cannot be read).
  using PythonTypeAt = std::function<std::optional<std::string>(uint32_t pid, uint64_t address)>;
  using Next = std::function<void(const tp_op_event&)>;
  // `ops` grows when a node name is first seen; then `ops_grew` is called.
  AutogradModel(OpTable* ops, SymbolAt symbol_at, PythonTypeAt python_type_at, std::function<void()> ops_grew);

  // Where op events go on, and the stats to count in (a capture window's
  // fresh model).
  void SetOutput(Next next, TraceStats* stats) {
    next_ = std::move(next);
    stats_ = stats;
  }
  // The engine's entry for a node (EV_AUTOGRAD_NODE): an op entry named
  // after the node's class.
  void OnNodeEntry(const tp_autograd_node_event& event);
  // Every op event goes through here.
  void OnOpEvent(const tp_op_event& event);
  void ForgetThread(uint32_t pid, uint32_t tid) { threads_.erase(ThreadKey(pid, tid)); }

 private:
  static constexpr uint32_t kNoInner = UINT32_MAX;
  // A renamed call open on a thread: an engine call, or the PyNode::apply
  // it ran.
  struct Pending {
    uint32_t probe_id;  // the op id its return carries
    uint64_t frame;
    uint32_t op_id;     // the named slice it opened
    uint32_t inner_id = kNoInner;  // an engine call of a PyNode: its apply's name
  };
  static uint64_t ThreadKey(uint32_t pid, uint32_t tid) { return (uint64_t{pid} << 32) | tid; }
  // The engine call's slice name's op id, and its node's apply's when the
  // node is a PyNode named by its Python class.
  std::pair<uint32_t, uint32_t> Resolve(uint32_t pid, uint32_t probe_id, uint64_t vtable, uint64_t python_type);
  uint32_t IdOf(const std::string& name);
  bool IsPyNodeApply(uint32_t op_id);
  std::optional<std::string> PythonName(uint32_t pid, uint64_t type);

  OpTable* ops_;
  SymbolAt symbol_at_;
  PythonTypeAt python_type_at_;
  std::unordered_map<uint64_t, std::string> python_names_;  // names read, by pid ^ type
  std::vector<int8_t> pynode_apply_;  // by op id: 1 a PyNode::apply probe, 0 not, -1 not known yet
  std::function<void()> ops_grew_;
  Next next_;
  TraceStats* stats_ = nullptr;
  std::unordered_map<std::string, uint32_t> by_name_;  // slice name -> op id
  std::unordered_map<uint64_t, std::vector<Pending>> threads_;  // open engine calls
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_AUTOGRAD_MODEL_H
