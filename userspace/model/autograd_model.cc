// Naming the autograd engine's calls after their nodes; see the header.
#include "userspace/model/autograd_model.h"

#include <utility>

#include "userspace/discover/autograd_probes.h"

namespace torchprobe {

AutogradModel::AutogradModel(OpTable* ops, SymbolAt symbol_at, PythonTypeAt python_type_at,
                             std::function<void()> ops_grew)
    : ops_(ops),
      symbol_at_(std::move(symbol_at)),
      python_type_at_(std::move(python_type_at)),
      ops_grew_(std::move(ops_grew)) {}

uint32_t AutogradModel::IdOf(const std::string& name) {
  auto [it, added] = by_name_.try_emplace(name, static_cast<uint32_t>(ops_->size()));
  if (added) {
    ops_->push_back(OpInfo{name, "", "", kAutogradNode});
    if (ops_grew_) ops_grew_();
  }
  return it->second;
}

std::optional<std::string> AutogradModel::PythonName(uint32_t pid, uint64_t type) {
  // Per (process, type): a Python class's type object lives as long as it.
  // Only a name read is kept: a read that failed once (the moment it was
  // tried) is tried again at the class's next node, or every node of that
  // class would stay unnamed for the rest of the run.
  uint64_t key = (uint64_t{pid} << 48) ^ type;
  auto it = python_names_.find(key);
  if (it != python_names_.end()) return it->second;
  std::optional<std::string> name = python_type_at_ ? python_type_at_(pid, type) : std::nullopt;
  if (name) python_names_.emplace(key, *name);
  return name;
}

std::pair<uint32_t, uint32_t> AutogradModel::Resolve(uint32_t pid, uint32_t probe_id, uint64_t vtable,
                                                     uint64_t python_type) {
  std::optional<std::string> node = vtable ? NodeNameOfVtable(symbol_at_(pid, vtable)) : std::nullopt;
  if (!node) {
    if (stats_) ++stats_->autograd_nodes_unnamed;
    return {probe_id, kNoInner};
  }
  uint32_t inner = kNoInner;
  if (*node == kPyNodeClass) {
    std::optional<std::string> python = python_type ? PythonName(pid, python_type) : std::nullopt;
    if (python && !python->empty()) {
      node = *python;
      inner = IdOf(*python);
    } else if (stats_) {
      ++stats_->autograd_python_nodes;
    }
  }
  return {IdOf(std::string(kEvaluateFunctionPrefix) + *node), inner};
}

bool AutogradModel::IsPyNodeApply(uint32_t op_id) {
  if (op_id >= ops_->size()) return false;
  if (op_id >= pynode_apply_.size()) pynode_apply_.resize(ops_->size(), -1);
  int8_t& known = pynode_apply_[op_id];
  if (known < 0) {
    const OpInfo& op = (*ops_)[op_id];
    known = op.category == kAutogradNode && op.name == kPyNodeClass;
  }
  return known == 1;
}

void AutogradModel::OnNodeEntry(const tp_autograd_node_event& event) {
  std::vector<Pending>& pending = threads_[ThreadKey(event.op.hdr.pid, event.op.hdr.tid)];
  // A call at this frame: whatever was called at or below it has returned.
  while (!pending.empty() && pending.back().frame <= event.op.frame) pending.pop_back();
  auto [op_id, inner] = Resolve(event.op.hdr.pid, event.op.op_id, event.vtable, event.py_type);
  pending.push_back(Pending{event.op.op_id, event.op.frame, op_id, inner});
  tp_op_event enter = event.op;
  enter.hdr.type = EV_OP_ENTER;
  enter.hdr.size = sizeof(enter);
  enter.op_id = op_id;
  enter.pad = 0;
  if (next_) next_(enter);
}

void AutogradModel::OnOpEvent(const tp_op_event& event) {
  auto it = threads_.find(ThreadKey(event.hdr.pid, event.hdr.tid));
  if (it != threads_.end() && event.hdr.type == EV_OP_ENTER && IsPyNodeApply(event.op_id)) {
    // A Python Function node's apply: named as its engine call's node.
    std::vector<Pending>& pending = it->second;
    while (!pending.empty() && pending.back().frame <= event.frame) pending.pop_back();
    if (!pending.empty() && pending.back().inner_id != kNoInner) {
      tp_op_event renamed = event;
      renamed.op_id = pending.back().inner_id;
      pending.push_back(Pending{event.op_id, event.frame, renamed.op_id});
      if (next_) next_(renamed);
      return;
    }
  }
  if (it != threads_.end() && (event.hdr.type == EV_OP_EXIT || event.hdr.type == EV_OP_UNWIND)) {
    std::vector<Pending>& pending = it->second;
    uint32_t probe_id = event.op_id & ~TP_COOKIE_SHARED_RET;
    for (size_t i = pending.size(); event.hdr.type == EV_OP_EXIT && i-- > 0;) {
      if (pending[i].frame != event.frame || pending[i].probe_id != probe_id) continue;
      tp_op_event renamed = event;
      renamed.op_id = pending[i].op_id;
      pending.resize(i);  // it, and anything it left open, returned
      if (next_) next_(renamed);
      return;
    }
    // Returned or unwound: calls made at or below this frame.
    while (!pending.empty() && pending.back().frame <= event.frame) pending.pop_back();
  }
  if (next_) next_(event);
}

}  // namespace torchprobe
