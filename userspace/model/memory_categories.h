// What kind of memory each allocation is (--memory with --shapes): PyTorch's
// memory profiler's categories (torch.profiler._memory_profiler: PARAMETER,
// GRADIENT, OPTIMIZER_STATE, INPUT, ACTIVATION, TEMPORARY, AUTOGRAD_DETAIL,
// unknown), inferred from outside the way it infers them without its Python
// tracer: from the data flow between ops.
//
// A TraceSink between the step slicer and the outputs (the memory set's
// DecorateSlices) and a MemorySink beside them. It keeps, per process:
//  - every allocation's life at its address (so an op's Tensor argument,
//    whose storage data pointer the shapes probe read at the op's entry,
//    names the allocation it lives in: a TensorKey);
//  - the data flow graph's nodes: the topmost ops of each tree (the ops with
//    a schema; record_function ranges are looked through), each autograd
//    node's range as one node in the backward pass, and allocations made
//    outside any op; each node's edges: the keys its ops read or write (the
//    schema's Tensor(a!) marks a write; an op without a schema writes all it
//    touches, as PyTorch assumes), the allocations and frees inside it.
// At the end (Finish) it runs PyTorch's passes over the graph — gradients
// from AccumulateGrad's first op's input, temporaries (allocated and freed
// in one node), inputs (tensors that take part in the gradient computation
// but never depend on a gradient), parameters (forward-pass inputs that are
// used for and updated from gradients), activations (flooded forward from
// inputs), autograd details (made in the backward pass) — and, where
// PyTorch needs its Python tracer, from what the trace shows: optimizer
// state is what the optimizer's step annotation (Optimizer.step#...)
// allocates or writes that is neither a parameter nor a gradient. The
// result goes to the sinks that take it (MemoryCategorySink): each
// allocation's category per version, the version bumps of in-place writes,
// and the bytes of each category over time, per process and device.
//
// Left out: an op's Tensor arguments past the first TP_SHAPES_TENSORS and
// in Tensor[] lists are not edges; tensors whose storage changes (set_,
// resize) are several keys, not one identity; module parameters seen only
// in a forward pass (no gradient) stay unknown, as in PyTorch without its
// Python tracer.
#ifndef TORCHPROBE_MODEL_MEMORY_CATEGORIES_H
#define TORCHPROBE_MODEL_MEMORY_CATEGORIES_H

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "userspace/model/memory_sink.h"
#include "userspace/model/trace_sink.h"

namespace torchprobe {

// PyTorch's Category values (INPUT = 1 ... OPTIMIZER_STATE = 7); 0 unknown.
enum class MemoryCategory : uint8_t {
  kUnknown = 0,
  kInput = 1,
  kTemporary = 2,
  kActivation = 3,
  kGradient = 4,
  kAutogradDetail = 5,
  kParameter = 6,
  kOptimizerState = 7,
};
inline constexpr int kMemoryCategories = 8;
// "INPUT", ..., "unknown" (PyTorch's names).
const char* MemoryCategoryName(MemoryCategory category);

struct MemoryCategoryResult {
  // An allocation: the process and the memory model's allocation id.
  using Key = std::pair<uint32_t, uint64_t>;
  // Each allocation's category by version (index: version; PyTorch counts
  // one per in-place write).
  std::map<Key, std::vector<MemoryCategory>> categories;
  // An in-place write: the allocation's version `from` became from + 1.
  struct Bump {
    uint64_t ts_ns = 0;
    Key key;
    uint32_t from = 0;
    uint64_t bytes = 0;
  };
  std::vector<Bump> bumps;  // in time order
  // The bytes of each category, each time one changes, per process and
  // device (-1: CPU memory), in time order.
  struct Change {
    uint64_t ts_ns = 0;
    uint32_t pid = 0;
    int16_t device = -1;
    MemoryCategory category = MemoryCategory::kUnknown;
    uint64_t bytes = 0;  // the category's bytes after the change
  };
  std::vector<Change> changes;
  uint64_t nodes = 0;           // data flow nodes
  uint64_t inputs_unjoined = 0; // Tensor arguments whose storage is no allocation seen
};

class MemoryCategorySink {
 public:
  virtual ~MemoryCategorySink() = default;
  virtual void AddMemoryCategories(const MemoryCategoryResult& result) = 0;
};

// The track name of a category's bytes: "CPU memory: PARAMETER", "cuda:0 memory: GRADIENT".
std::string MemoryCategoryTrackName(int device, MemoryCategory category);

class MemoryCategories : public TraceSink, public MemorySink {
 public:
  // `next`: where the slices go on; `sinks`: who takes the result (the
  // window's files, the timeline), more with AddSink.
  MemoryCategories(TraceSink* next, const OpTable* ops, std::vector<MemoryCategorySink*> sinks = {})
      : next_(next), ops_(ops), also_(std::move(sinks)) {}
  void AddSink(MemoryCategorySink* sink) { also_.push_back(sink); }

  void Begin(const OpTable& ops, const ClockSnapshot& clock) override { next_->Begin(ops, clock); }
  void AddOps(const OpTable& ops) override { next_->AddOps(ops); }
  void AddProcess(const ProcessInfo& process) override { next_->AddProcess(process); }
  void AddThread(const ThreadInfo& thread) override { next_->AddThread(thread); }
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override;
  void AddMemoryEvent(const MemoryEvent& event) override;
  // Infers the categories, hands the result to the sinks, then finishes `next`.
  bool Finish(const TraceStats& stats, std::string* error) override;

  // The inference alone (tests).
  MemoryCategoryResult Infer();

 private:
  struct Life {  // one allocation at an address
    uint64_t id = 0;
    uint64_t alloc_ns = 0;
    uint64_t free_ns = UINT64_MAX;
    uint64_t bytes = 0;
    int16_t device = -1;
  };
  struct Edge {
    uint64_t key = 0;  // index into keys_
    int8_t mutated = 0;  // 1 written, 0 read, -1 not known (no schema)
  };
  struct Node {
    uint32_t pid = 0;
    uint64_t begin_ns = 0;
    uint64_t end_ns = 0;
    bool backward = false;   // in an autograd node's range
    uint64_t optimizer_end_ns = 0;  // inside an Optimizer.step# annotation: its end (0: not)
    std::vector<Edge> reads;        // Tensor arguments of its ops
    std::vector<uint64_t> allocs;   // keys allocated in it
    std::vector<uint64_t> frees;    // keys freed in it
    int64_t gradient = -1;          // AccumulateGrad: the key of the gradient it makes (or adds to)
  };
  struct KeyInfo {
    uint32_t pid = 0;
    uint64_t id = 0;      // the memory model's allocation id (0: allocated before tracing)
    uint64_t bytes = 0;
    int16_t device = -1;
  };
  // The key of the allocation at `address` in `pid` at `ts_ns` (one made for
  // memory allocated before tracing, per address, until its free).
  uint64_t KeyAt(uint32_t pid, uint64_t address, uint64_t ts_ns);
  uint64_t KeyOf(uint32_t pid, uint64_t id, uint64_t bytes, int16_t device);
  uint64_t NewKey(uint32_t pid, uint64_t id, uint64_t bytes, int16_t device);
  // The key a memory event allocates or frees.
  uint64_t KeyOfEvent(const MemoryEvent& event);
  // The nodes of one top-level tree.
  void AddNodes(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices);
  // The memory events of `tid` before `until_ns` not in any node: nodes of their own.
  void FlushLoose(uint32_t pid, uint32_t tid, uint64_t until_ns);
  void TakeEvents(uint32_t pid, uint32_t tid, Node& node);

  TraceSink* next_;
  const OpTable* ops_;
  std::vector<MemoryCategorySink*> also_;
  std::vector<Node> nodes_;
  std::vector<KeyInfo> keys_;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> key_of_id_;        // (pid, allocation id) -> key
  struct Preexisting {  // memory allocated before tracing, at an address
    uint64_t key = 0;
    uint64_t free_ns = UINT64_MAX;
  };
  std::map<std::pair<uint32_t, uint64_t>, std::vector<Preexisting>> preexisting_;  // (pid, address)
  std::map<std::pair<uint32_t, uint64_t>, std::vector<Life>> lives_;   // (pid, address) -> lives
  std::map<std::pair<uint32_t, uint32_t>, std::vector<MemoryEvent>> waiting_;  // by (pid, tid): not yet in a node
  struct Moment {  // an allocation or free, for the bytes over time
    uint64_t ts_ns = 0;
    uint64_t key = 0;
    bool alloc = false;
  };
  std::vector<Moment> moments_;
  uint64_t unjoined_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_MEMORY_CATEGORIES_H
