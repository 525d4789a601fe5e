// Renaming boxed calls; see the header.
#include "userspace/model/boxed_model.h"

#include <cstring>
#include <utility>

#include "userspace/base/unobserved_ops.h"

namespace torchprobe {
namespace {

std::string OpKey(const std::string& name, const std::string& overload) {
  return overload.empty() ? name : name + "." + overload;
}

std::string Field(const char* text) { return std::string(text, strnlen(text, TP_OP_NAME_LEN)); }

}  // namespace

BoxedModel::BoxedModel(OpTable* ops, OpStackModel* model, std::function<void()> ops_grew)
    : ops_(ops), model_(model), ops_grew_(std::move(ops_grew)) {}

uint32_t BoxedModel::Resolve(const tp_boxed_event& event) {
  std::string name = Field(event.name);
  std::string overload = Field(event.overload);
  TraceStats& stats = model_->stats();
  if (name.empty()) {  // the handle could not be read: the copy's own name stands
    ++stats.boxed_unread;
    return event.op_id;
  }
  if (IsUnobservedOp(name)) return kDropped;
  for (; indexed_ < ops_->size(); ++indexed_) {
    const OpInfo& op = (*ops_)[indexed_];
    if (copies_.count(static_cast<uint32_t>(indexed_))) continue;
    by_name_.try_emplace(OpKey(op.name, op.overload), static_cast<uint32_t>(indexed_));
  }
  auto [it, added] = by_name_.try_emplace(OpKey(name, overload), static_cast<uint32_t>(ops_->size()));
  if (added) {  // a custom op, a torch.ops-only op, or one libtorch has no ::call for
    ++stats.boxed_ops_unlisted;
    ops_->push_back(OpInfo{name, overload, ""});
    indexed_ = ops_->size();
    if (ops_grew_) ops_grew_();
  }
  return it->second;
}

void BoxedModel::ForgetBelow(ThreadState& t, uint64_t frame) {
  while (!t.pending.empty() && t.pending.back().frame <= frame) t.pending.pop_back();
}

void BoxedModel::OnBoxedEvent(const tp_boxed_event& event) {
  ThreadState& t = threads_[ThreadKey(event.hdr.pid, event.hdr.tid)];
  ForgetBelow(t, event.frame);  // a call at this frame: what ran there returned
  uint32_t op_id = Resolve(event);
  t.pending.push_back(Pending{event.op_id, event.frame, op_id});
  t.armed = kNone;
  if (op_id == kDropped) return;
  t.armed = op_id;
  tp_op_event enter = {};
  enter.hdr = event.hdr;
  enter.hdr.type = EV_OP_ENTER;
  enter.hdr.size = sizeof(enter);
  enter.op_id = op_id;
  enter.frame = event.frame;
  model_->OnOpEvent(enter);
}

void BoxedModel::OnOpEvent(const tp_op_event& event) {
  auto it = threads_.find(ThreadKey(event.hdr.pid, event.hdr.tid));
  if (it == threads_.end()) {  // no boxed call on this thread yet
    model_->OnOpEvent(event);
    return;
  }
  ThreadState& t = it->second;
  uint32_t armed = std::exchange(t.armed, kNone);
  uint32_t probe_id = event.op_id & ~TP_COOKIE_SHARED_RET;
  switch (event.hdr.type) {
    case EV_OP_ENTER:
      ForgetBelow(t, event.frame);
      if (probe_id == armed) {  // the same op's ::call right inside its boxed entry
        ++model_->stats().boxed_duplicates;
        t.pending.push_back(Pending{probe_id, event.frame, kDropped});
        return;
      }
      break;
    case EV_OP_EXIT:
      for (size_t i = t.pending.size(); i-- > 0;) {
        const Pending& p = t.pending[i];
        if (p.frame != event.frame || p.probe_id != probe_id) continue;
        uint32_t op_id = p.op_id;
        t.pending.resize(i);  // it and anything it left open have returned
        if (op_id == kDropped) return;
        tp_op_event renamed = event;
        renamed.op_id = op_id;
        model_->OnOpEvent(renamed);
        return;
      }
      break;
    case EV_OP_UNWIND:
      ForgetBelow(t, event.frame);  // the exception unwound them
      break;
    default:
      break;
  }
  model_->OnOpEvent(event);
}

}  // namespace torchprobe
