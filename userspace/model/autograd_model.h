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
// as autograd_nodes_unnamed; a Python Function's node (PyNode) is counted as
// autograd_python_nodes (see autograd_probes.h).
#ifndef TORCHPROBE_MODEL_AUTOGRAD_MODEL_H
#define TORCHPROBE_MODEL_AUTOGRAD_MODEL_H

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bpf/events.h"
#include "userspace/model/op_table.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

class AutogradModel {
 public:
  // The demangled symbol at `address` in `pid` ("" when none).
  using SymbolAt = std::function<std::string(uint32_t pid, uint64_t address)>;
  using Next = std::function<void(const tp_op_event&)>;
  // `ops` grows when a node name is first seen; then `ops_grew` is called.
  AutogradModel(OpTable* ops, SymbolAt symbol_at, std::function<void()> ops_grew);

  // Where op events go on, and the stats to count in (a capture window's
  // fresh model).
  void SetOutput(Next next, TraceStats* stats) {
    next_ = std::move(next);
    stats_ = stats;
  }
  // An entry through the raw-arguments program: true when it was the
  // engine's (TP_AUTOGRAD_NODE), which is then handled here.
  bool OnNodeEntry(const tp_cuda_call_event& event);
  // Every op event goes through here.
  void OnOpEvent(const tp_op_event& event);
  void ForgetThread(uint32_t pid, uint32_t tid) { threads_.erase(ThreadKey(pid, tid)); }

 private:
  struct Pending {
    uint32_t probe_id;  // the op id its return carries
    uint64_t frame;
    uint32_t op_id;     // the named slice it opened
  };
  static uint64_t ThreadKey(uint32_t pid, uint32_t tid) { return (uint64_t{pid} << 32) | tid; }
  uint32_t Resolve(uint32_t pid, uint32_t probe_id, uint64_t vtable);

  OpTable* ops_;
  SymbolAt symbol_at_;
  std::function<void()> ops_grew_;
  Next next_;
  TraceStats* stats_ = nullptr;
  std::unordered_map<std::string, uint32_t> by_name_;  // slice name -> op id
  std::unordered_map<uint64_t, std::vector<Pending>> threads_;  // open engine calls
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_AUTOGRAD_MODEL_H
