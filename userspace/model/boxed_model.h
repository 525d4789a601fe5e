// Boxed entries -> op slices named as PyTorch names the op called.
//
// A copy of Dispatcher::callBoxed is probed like an op (its returns come
// back under the copy's own op id), and its entry carries the operator's
// name and overload (bpf/boxed.bpf.c). This component sits in front of the
// OpStackModel and renames: the entry opens a slice of the op the name
// resolves to (the at::_ops op of that name and overload, so its schema
// comes along; an op no at::_ops function names is added to the op table
// without a schema, counted as boxed_ops_unlisted), and the copy's return
// closes it. Two rules give the profiler's meaning:
//  - ops it never records (unobserved_ops.h) are dropped with their return;
//  - one slice per top-level dispatcher entry: when the boxed kernel calls
//    at::_ops::<same op>::call right away (a boxed-to-unboxed wrapper), the
//    inner entry and its return are dropped.
#ifndef TORCHPROBE_MODEL_BOXED_MODEL_H
#define TORCHPROBE_MODEL_BOXED_MODEL_H

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bpf/events.h"
#include "userspace/base/op_table.h"
#include "userspace/model/op_stack_model.h"

namespace torchprobe {

class BoxedModel {
 public:
  // `ops` grows when an unlisted op is seen; then `ops_grew` is called.
  BoxedModel(OpTable* ops, OpStackModel* model, std::function<void()> ops_grew);

  // `op_id` is a copy of Dispatcher::callBoxed (its events are renamed).
  void AddCopy(uint32_t op_id) { copies_.insert(op_id); }
  // Feeds `model` from now on (a capture window's fresh model).
  void SetModel(OpStackModel* model) { model_ = model; }
  void OnBoxedEvent(const tp_boxed_event& event);
  // Every op event goes through here to the OpStackModel.
  void OnOpEvent(const tp_op_event& event);
  // The thread exited (its open ops are closed by the OpStackModel).
  void ForgetThread(uint32_t pid, uint32_t tid) { threads_.erase(ThreadKey(pid, tid)); }

 private:
  struct Pending {
    uint32_t probe_id;  // the op id the return will carry (copy or inner op)
    uint64_t frame;
    uint32_t op_id;     // what it became; kDropped: left out with its return
  };
  struct ThreadState {
    std::vector<Pending> pending;  // open boxed calls and dropped inner entries
    uint32_t armed = kNone;        // the op a boxed entry just opened: its ::call next is a duplicate
  };
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr uint32_t kDropped = UINT32_MAX - 1;

  static uint64_t ThreadKey(uint32_t pid, uint32_t tid) { return (uint64_t{pid} << 32) | tid; }
  uint32_t Resolve(const tp_boxed_event& event);
  // Forgets pending calls on frames at or below `frame` (they have returned).
  static void ForgetBelow(ThreadState& t, uint64_t frame);

  OpTable* ops_;
  OpStackModel* model_;
  std::function<void()> ops_grew_;
  std::unordered_set<uint32_t> copies_;
  std::unordered_map<std::string, uint32_t> by_name_;  // "aten::mul.Tensor" -> op id
  size_t indexed_ = 0;                                 // ops_ entries in by_name_
  std::unordered_map<uint64_t, ThreadState> threads_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_BOXED_MODEL_H
