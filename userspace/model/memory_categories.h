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
// Bounded memory: the graph is inferred in chunks of kChunkNodes nodes (many
// training steps each), each as PyTorch infers a trace that begins mid-run
// (tensors from before are read and written like any other); what stays
// from one chunk to the next is the allocations still alive, their counted
// category and version, and the bytes per category. An allocation alive
// across chunks is moved to the category the new chunk finds for it (when
// it finds one). Allocations' lives at their addresses are kept for
// kLivesHorizonNs after their free (a tree reaches here when its step ends).
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
  // Keeps nothing from now on, infers nothing (a flight recorder between
  // dumps: what it keeps is the ring's; a dump gets its own categorizer).
  void Disable() { disabled_ = true; }

  void Begin(const OpTable& ops, const ClockSnapshot& clock) override { next_->Begin(ops, clock); }
  void AddOps(const OpTable& ops) override { next_->AddOps(ops); }
  void AddProcess(const ProcessInfo& process) override { next_->AddProcess(process); }
  void AddThread(const ThreadInfo& thread) override { next_->AddThread(thread); }
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override;
  void AddMemoryEvent(const MemoryEvent& event) override;
  // Infers the last chunk's categories, hands them to the sinks, then finishes `next`.
  bool Finish(const TraceStats& stats, std::string* error) override;

  static constexpr size_t kChunkNodes = 1 << 16;
  static constexpr uint64_t kLivesHorizonNs = 30'000'000'000;

 private:
  struct Life {  // one allocation at an address
    uint64_t key = 0;
    uint64_t alloc_ns = 0;
    uint64_t free_ns = UINT64_MAX;
  };
  struct Edge {
    uint64_t key = 0;
    int8_t mutated = 0;  // 1 written, 0 read, -1 not known (no schema)
  };
  struct Node {
    uint32_t pid = 0;
    bool backward = false;   // in an autograd node's range
    uint64_t begin_ns = 0;
    uint64_t end_ns = 0;
    uint64_t optimizer_end_ns = 0;  // inside an Optimizer.step# annotation: its end (0: not)
    int64_t gradient = -1;          // AccumulateGrad: the key of the gradient it makes (or adds to)
    uint32_t reads = 0, allocs = 0, frees = 0;  // where its edges begin in reads_, allocs_, frees_
    uint32_t reads_end = 0, allocs_end = 0, frees_end = 0;
  };
  struct KeyInfo {
    uint32_t pid = 0;
    int16_t device = -1;
    uint64_t id = 0;      // the memory model's allocation id (0: allocated before tracing)
    uint64_t bytes = 0;
  };
  struct Moment {  // an allocation or free, for the bytes over time
    uint64_t ts_ns = 0;
    uint64_t key = 0;
    bool alloc = false;
  };
  struct Preexisting {  // memory allocated before tracing, at an address
    uint64_t key = 0;
    uint64_t free_ns = UINT64_MAX;
  };
  struct Live {  // an allocation alive now, as counted
    uint32_t version = 0;
    MemoryCategory category = MemoryCategory::kUnknown;
  };

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
  // One allocation or free into the chunk: its key to allocs_ or frees_, and a moment.
  void TakeEvent(const MemoryEvent& event);
  // Infers the chunk so far, counts its bytes, hands the result on and
  // forgets what no later chunk needs.
  void RunChunk();
  MemoryCategoryResult InferChunk();
  void Forget(uint64_t now_ns);

  TraceSink* next_;
  const OpTable* ops_;
  std::vector<MemoryCategorySink*> also_;
  std::vector<Node> nodes_;  // this chunk's
  std::vector<Edge> reads_;
  std::vector<uint64_t> allocs_, frees_;
  std::vector<Moment> moments_;  // this chunk's
  std::unordered_map<uint64_t, KeyInfo> keys_;
  uint64_t next_key_ = 0;
  std::unordered_map<uint64_t, uint64_t> key_of_id_;  // pid << 40 | allocation id -> key
  std::unordered_map<uint64_t, std::vector<Preexisting>> preexisting_;  // pid << 48 ^ address
  std::unordered_map<uint64_t, std::vector<Life>> lives_;               // pid << 48 ^ address
  std::map<std::pair<uint32_t, uint32_t>, std::vector<MemoryEvent>> waiting_;  // by (pid, tid): not yet in a node
  std::unordered_map<uint64_t, Live> live_;  // allocations alive, by key
  std::map<std::pair<uint32_t, int16_t>, std::array<uint64_t, kMemoryCategories>> bytes_;  // (pid, device)
  uint64_t last_ns_ = 0;
  bool disabled_ = false;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_MEMORY_CATEGORIES_H
