// PyTorch's memory categories from the data flow between ops; see the header
// (the passes follow torch/profiler/_memory_profiler.py's MemoryProfile).
#include "userspace/model/memory_categories.h"

#include <algorithm>
#include <unordered_set>
#include <cstring>

namespace torchprobe {
namespace {

constexpr const char* kAccumulateGrad = "torch::autograd::AccumulateGrad";
constexpr const char* kEvaluatePrefix = "autograd::engine::evaluate_function: ";
constexpr const char* kOptimizerPrefix = "Optimizer.step#";

using C = MemoryCategory;

// One edge of a node, as PyTorch's DataFlowEdge: an input version (none for
// an allocation) and whether it was written (or, none, freed).
struct FlowEdge {
  bool has_input = false;
  uint32_t input_version = 0;
  enum { kRead, kWritten, kFreed } mutated = kRead;
  bool allocation() const { return !has_input; }
  bool deletion() const { return mutated == kFreed; }
};

using Version = std::pair<uint64_t, uint32_t>;  // (key, version)

// The maps' keys: an address in a process, an allocation id in a process.
uint64_t AtAddress(uint32_t pid, uint64_t address) { return (uint64_t{pid} << 48) ^ address; }
uint64_t OfId(uint32_t pid, uint64_t id) { return (uint64_t{pid} << 40) | id; }
int16_t DeviceOf(const MemoryEvent& e) { return e.device_type == 0 ? -1 : e.device_index; }

// Drops from each address' list what was freed before `horizon` (and the
// lists left empty); `kept` gets the keys that stay.
template <typename ByAddress>
void PruneFreed(ByAddress& by_address, uint64_t horizon, std::unordered_set<uint64_t>& kept) {
  for (auto it = by_address.begin(); it != by_address.end();) {
    auto& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& e) { return e.free_ns < horizon; }), list.end());
    for (const auto& e : list) kept.insert(e.key);
    it = list.empty() ? by_address.erase(it) : std::next(it);
  }
}

}  // namespace

const char* MemoryCategoryName(MemoryCategory category) {
  static constexpr const char* kNames[] = {"unknown",  "INPUT",           "TEMPORARY", "ACTIVATION",
                                           "GRADIENT", "AUTOGRAD_DETAIL", "PARAMETER", "OPTIMIZER_STATE"};
  return kNames[static_cast<int>(category)];
}

std::string MemoryCategoryTrackName(int device, MemoryCategory category) {
  return (device < 0 ? std::string("CPU") : "cuda:" + std::to_string(device)) + " memory: " +
         MemoryCategoryName(category);
}

uint64_t MemoryCategories::NewKey(uint32_t pid, uint64_t id, uint64_t bytes, int16_t device) {
  keys_[next_key_] = KeyInfo{pid, device, id, bytes};
  return next_key_++;
}

uint64_t MemoryCategories::KeyOf(uint32_t pid, uint64_t id, uint64_t bytes, int16_t device) {
  auto [it, inserted] = key_of_id_.try_emplace(OfId(pid, id), 0);
  if (inserted) it->second = NewKey(pid, id, bytes, device);
  return it->second;
}

uint64_t MemoryCategories::KeyAt(uint32_t pid, uint64_t address, uint64_t ts_ns) {
  uint64_t where = AtAddress(pid, address);
  if (auto lives = lives_.find(where); lives != lives_.end())
    for (auto life = lives->second.rbegin(); life != lives->second.rend(); ++life)
      if (life->alloc_ns <= ts_ns && ts_ns <= life->free_ns) return life->key;
  // Not allocated while tracing: memory from before, one key until its free.
  std::vector<Preexisting>& before = preexisting_[where];
  for (const Preexisting& p : before)
    if (ts_ns <= p.free_ns) return p.key;
  before.push_back({NewKey(pid, 0, 0, -1), UINT64_MAX});
  return before.back().key;
}

uint64_t MemoryCategories::KeyOfEvent(const MemoryEvent& e) {
  int16_t device = DeviceOf(e);
  if (e.kind != MemoryEvent::kPreexistingFree) return KeyOf(e.pid, e.id, e.bytes, device);
  std::vector<Preexisting>& before = preexisting_[AtAddress(e.pid, e.address)];
  for (Preexisting& p : before)
    if (p.free_ns == UINT64_MAX) {
      p.free_ns = e.ts_ns;
      keys_[p.key].bytes = e.bytes;
      keys_[p.key].device = device;
      return p.key;
    }
  before.push_back({NewKey(e.pid, 0, e.bytes, device), e.ts_ns});
  return before.back().key;
}

void MemoryCategories::AddMemoryEvent(const MemoryEvent& e) {
  if (e.segment || disabled_) return;  // the caching allocator's segments hold no tensor of their own
  last_ns_ = std::max(last_ns_, e.ts_ns);
  uint64_t where = AtAddress(e.pid, e.address);
  if (e.kind == MemoryEvent::kAlloc) {
    lives_[where].push_back(Life{KeyOf(e.pid, e.id, e.bytes, DeviceOf(e)), e.ts_ns, UINT64_MAX});
  } else if (e.kind == MemoryEvent::kFree) {
    auto key = key_of_id_.find(OfId(e.pid, e.id));
    if (key != key_of_id_.end())
      for (Life& life : lives_[where])
        if (life.key == key->second) life.free_ns = e.ts_ns;
  }
  waiting_[{e.pid, e.tid}].push_back(e);
}

void MemoryCategories::TakeEvent(const MemoryEvent& e) {
  uint64_t key = KeyOfEvent(e);
  (e.kind == MemoryEvent::kAlloc ? allocs_ : frees_).push_back(key);
  moments_.push_back({e.ts_ns, key, e.kind == MemoryEvent::kAlloc});
}

void MemoryCategories::TakeEvents(uint32_t pid, uint32_t tid, Node& node) {
  auto it = waiting_.find({pid, tid});
  if (it == waiting_.end()) return;
  std::vector<MemoryEvent> rest;
  for (const MemoryEvent& e : it->second) {
    if (e.ts_ns < node.begin_ns || e.ts_ns > node.end_ns) {
      rest.push_back(e);
      continue;
    }
    TakeEvent(e);
  }
  it->second = std::move(rest);
}

void MemoryCategories::FlushLoose(uint32_t pid, uint32_t tid, uint64_t until_ns) {
  auto it = waiting_.find({pid, tid});
  if (it == waiting_.end()) return;
  std::vector<MemoryEvent> rest;
  for (const MemoryEvent& e : it->second) {
    if (e.ts_ns >= until_ns) {
      rest.push_back(e);
      continue;
    }
    // An allocation or free outside every op: a node of its own, as PyTorch makes it.
    Node node;
    node.pid = pid;
    node.begin_ns = node.end_ns = e.ts_ns;
    node.reads = node.reads_end = static_cast<uint32_t>(reads_.size());
    node.allocs = static_cast<uint32_t>(allocs_.size());
    node.frees = static_cast<uint32_t>(frees_.size());
    TakeEvent(e);
    node.allocs_end = static_cast<uint32_t>(allocs_.size());
    node.frees_end = static_cast<uint32_t>(frees_.size());
    nodes_.push_back(node);
  }
  it->second = std::move(rest);
}

void MemoryCategories::AddNodes(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) {
  auto name_of = [this](const Slice& s) -> const std::string& { return (*ops_)[s.op_id].name; };
  auto category_of = [this](const Slice& s) -> const std::string& { return (*ops_)[s.op_id].category; };
  std::vector<size_t> ancestors;
  for (size_t i = 0; i < slices.size();) {
    const Slice& s = slices[i];
    while (!ancestors.empty() && slices[ancestors.back()].depth >= s.depth) ancestors.pop_back();
    size_t end = i + 1;
    while (end < slices.size() && slices[end].depth > s.depth) ++end;
    if (s.op_id >= ops_->size()) {
      ++i;
      continue;
    }
    const std::string& category = category_of(s);
    bool op = category.empty();
    // An autograd node's own range inside evaluate_function (its name after
    // the prefix), or evaluate_function itself when it holds none.
    bool node_range = false;
    if (!ancestors.empty()) {
      const std::string& parent = name_of(slices[ancestors.back()]);
      node_range = parent.starts_with(kEvaluatePrefix) && parent.substr(strlen(kEvaluatePrefix)) == name_of(s);
    }
    if (category == kAutogradNode && name_of(s).starts_with(kEvaluatePrefix)) {
      bool inner = false;
      for (size_t j = i + 1; j < end; ++j)
        inner |= slices[j].depth == s.depth + 1 && name_of(s).substr(strlen(kEvaluatePrefix)) == name_of(slices[j]);
      node_range = !inner;
    }
    if (!op && !node_range) {  // a range looked through
      ancestors.push_back(i++);
      continue;
    }
    Node node;
    node.pid = pid;
    node.begin_ns = s.begin_ns;
    node.end_ns = s.end_ns;
    node.backward = node_range;
    for (size_t a : ancestors) {
      if (name_of(slices[a]).starts_with(kOptimizerPrefix)) node.optimizer_end_ns = slices[a].end_ns;
      if (category_of(slices[a]) == kAutogradNode && !name_of(slices[a]).starts_with(kEvaluatePrefix))
        node.backward = true;
    }
    node.reads = static_cast<uint32_t>(reads_.size());
    for (size_t j = i; j < end; ++j) {
      if (!slices[j].inputs || slices[j].op_id >= ops_->size()) continue;
      bool schema = !(*ops_)[slices[j].op_id].schema.empty();
      for (const OpInput& in : slices[j].inputs->args) {
        if (in.kind != OpInput::kTensor || in.storage_data == 0) continue;
        reads_.push_back(
            {KeyAt(pid, in.storage_data, slices[j].begin_ns), static_cast<int8_t>(schema ? in.mutated : -1)});
      }
    }
    node.reads_end = static_cast<uint32_t>(reads_.size());
    // AccumulateGrad: a new gradient is detached into place, an existing one added to.
    const std::string& name = name_of(s);
    if ((name == kAccumulateGrad || name == std::string(kEvaluatePrefix) + kAccumulateGrad) && end > i + 1) {
      const Slice& first = slices[i + 1];
      const std::string& child = name_of(first);
      if ((child == "aten::detach" || child == "aten::add_") && first.inputs && !first.inputs->args.empty() &&
          first.inputs->args[0].kind == OpInput::kTensor && first.inputs->args[0].storage_data)
        node.gradient = static_cast<int64_t>(KeyAt(pid, first.inputs->args[0].storage_data, first.begin_ns));
    }
    FlushLoose(pid, tid, node.begin_ns);
    node.allocs = static_cast<uint32_t>(allocs_.size());
    node.frees = static_cast<uint32_t>(frees_.size());
    TakeEvents(pid, tid, node);
    node.allocs_end = static_cast<uint32_t>(allocs_.size());
    node.frees_end = static_cast<uint32_t>(frees_.size());
    nodes_.push_back(node);
    i = end;
  }
}

void MemoryCategories::AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) {
  if (!slices.empty() && !disabled_) {
    FlushLoose(pid, tid, slices.front().begin_ns);
    AddNodes(pid, tid, slices);
    FlushLoose(pid, tid, slices.front().end_ns + 1);  // inside the tree but in no op
    last_ns_ = std::max(last_ns_, slices.front().end_ns);
    if (nodes_.size() >= kChunkNodes) RunChunk();
  }
  next_->AddSliceTree(pid, tid, slices);
}

MemoryCategoryResult MemoryCategories::InferChunk() {
  std::stable_sort(nodes_.begin(), nodes_.end(), [](const Node& a, const Node& b) { return a.begin_ns < b.begin_ns; });

  // The data flow graph: each node's inputs, outputs and intermediates with
  // versions (DataFlowGraph, DataFlowNode._determine_edges).
  struct Flow {
    std::vector<Version> inputs, outputs;
    std::vector<uint64_t> intermediates;
    std::vector<std::pair<uint64_t, uint32_t>> bumped;  // written: (key, version before)
  };
  std::vector<Flow> flows(nodes_.size());
  std::unordered_map<uint64_t, uint32_t> active;  // key -> its version in this chunk
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    std::map<uint64_t, FlowEdge> edges;
    std::map<uint64_t, std::set<int8_t>> mutable_by_key;
    for (uint32_t r = node.reads; r < node.reads_end; ++r) mutable_by_key[reads_[r].key].insert(reads_[r].mutated);
    for (const auto& [key, marks] : mutable_by_key) {
      FlowEdge& e = edges[key];
      e.has_input = true;
      e.input_version = active[key];
      bool written = marks.count(1) || (marks.size() == 1 && marks.count(-1));
      e.mutated = written ? FlowEdge::kWritten : FlowEdge::kRead;
    }
    for (uint32_t f = node.frees; f < node.frees_end; ++f) {
      uint64_t key = frees_[f];
      FlowEdge& e = edges[key];
      e.mutated = FlowEdge::kFreed;
      e.has_input = true;
      e.input_version = active[key];
    }
    for (uint32_t a = node.allocs; a < node.allocs_end; ++a) edges[allocs_[a]].has_input = false;
    Flow& f = flows[n];
    for (const auto& [key, e] : edges) {
      if (e.mutated == FlowEdge::kWritten && !e.allocation()) {
        f.bumped.emplace_back(key, active[key]);
        ++active[key];
      }
      if (!e.allocation()) f.inputs.emplace_back(key, e.input_version);
      if ((e.allocation() && !e.deletion()) || e.mutated == FlowEdge::kWritten)
        f.outputs.emplace_back(key, e.allocation() ? 0 : e.input_version + 1);
      if (e.allocation() && e.deletion()) f.intermediates.push_back(key);
    }
  }

  // CategoryDict: by id (here, by key) first, then by key, then by version.
  std::unordered_map<uint64_t, C> by_id, by_key;
  std::map<Version, C> by_version;
  auto get = [&](uint64_t key, uint32_t version) {
    if (auto it = by_id.find(key); it != by_id.end()) return it->second;
    if (auto it = by_key.find(key); it != by_key.end()) return it->second;
    if (auto it = by_version.find({key, version}); it != by_version.end()) return it->second;
    return C::kUnknown;
  };
  auto is = [&](const Version& v, std::initializer_list<C> any) {
    C c = get(v.first, v.second);
    return std::find(any.begin(), any.end(), c) != any.end();
  };
  auto setdefault_by_version = [&](const Version& v, C c) { by_version.emplace(v, c); };

  // Gradients and temporaries.
  for (const Node& node : nodes_)
    if (node.gradient >= 0) by_id[static_cast<uint64_t>(node.gradient)] = C::kGradient;
  for (const Flow& f : flows)
    for (uint64_t key : f.intermediates) by_key[key] = C::kTemporary;

  auto depends_on_gradient = [&] {
    std::set<uint64_t> depends;
    for (;;) {
      size_t before = depends.size();
      for (const Flow& f : flows) {
        std::vector<uint64_t> ids;
        for (const Version& v : f.inputs)
          if (is(v, {C::kGradient, C::kParameter}) || depends.count(v.first)) ids.push_back(v.first);
        if (ids.empty()) continue;
        depends.insert(ids.begin(), ids.end());
        for (const Version& v : f.outputs) depends.insert(v.first);
      }
      if (depends.size() == before) return depends;
    }
  };

  // What depends on a gradient, as PyTorch computes it before the inputs and
  // again before the parameters: only gradients and parameters count, and
  // none is named between the two, so once serves both.
  std::set<uint64_t> depends = depends_on_gradient();

  // Inputs: take part in computing a gradient, never depend on one.
  {
    std::set<Version> produces;
    for (size_t n = flows.size(); n-- > 0;) {
      std::set<Version> tensors(flows[n].inputs.begin(), flows[n].inputs.end());
      tensors.insert(flows[n].outputs.begin(), flows[n].outputs.end());
      bool any = false;
      for (const Version& v : tensors) any |= is(v, {C::kGradient, C::kParameter}) || produces.count(v);
      if (any) produces.insert(tensors.begin(), tensors.end());
    }
    for (size_t n = 0; n < flows.size(); ++n)
      if (nodes_[n].backward)
        for (const Version& v : flows[n].outputs) produces.erase(v);
    for (const Version& v : produces)
      if (!depends.count(v.first)) setdefault_by_version(v, C::kInput);
  }

  // Every (key, version) the graph knows (MemoryProfile._category_snapshot).
  auto snapshot = [&] {
    std::set<Version> all;
    for (const Flow& f : flows) {
      all.insert(f.inputs.begin(), f.inputs.end());
      for (uint64_t key : f.intermediates) all.emplace(key, 0);
      all.insert(f.outputs.begin(), f.outputs.end());
    }
    for (const auto& [key, c] : by_id) all.emplace(key, 0);
    return all;
  };

  // Parameters: forward-pass inputs used for a gradient that depend on one.
  {
    std::set<Version> known = snapshot();
    std::set<Version> candidates, forward;
    for (const Version& v : known)
      if (get(v.first, v.second) == C::kInput) forward.insert(v);
    for (size_t n = 0; n < flows.size(); ++n) {
      const Flow& f = flows[n];
      std::set<Version> inputs(f.inputs.begin(), f.inputs.end());
      bool gradient = false, touches_forward = false;
      for (const Version& v : inputs) gradient |= get(v.first, v.second) == C::kGradient;
      for (const Version& v : f.outputs) gradient |= get(v.first, v.second) == C::kGradient;
      for (const Version& v : inputs) touches_forward |= forward.count(v) > 0;
      if (nodes_[n].backward || gradient || !touches_forward) continue;
      forward.insert(f.outputs.begin(), f.outputs.end());
      for (const Version& v : inputs)
        if (!forward.count(v)) candidates.insert(v);
    }
    std::set<Version> used;
    for (size_t n = flows.size(); n-- > 0;) {
      bool any = false;
      for (const Version& v : flows[n].outputs) any |= get(v.first, v.second) == C::kGradient || used.count(v);
      if (any) used.insert(flows[n].inputs.begin(), flows[n].inputs.end());
    }
    std::set<uint64_t> parameters;
    for (const Version& v : candidates)
      if (used.count(v) && depends.count(v.first)) parameters.insert(v.first);
    for (const Version& v : known)
      if (parameters.count(v.first)) by_id[v.first] = C::kParameter;
  }

  // Activations: flooded forward from the inputs.
  for (size_t n = 0; n < flows.size(); ++n) {
    if (nodes_[n].backward) continue;
    bool required = false, other = false;
    for (const Version& v : flows[n].inputs) {
      C c = get(v.first, v.second);
      required |= c == C::kInput || c == C::kActivation;
      other |= !(c == C::kInput || c == C::kActivation || c == C::kParameter || c == C::kTemporary);
    }
    if (required && !other)
      for (const Version& v : flows[n].outputs) setdefault_by_version(v, C::kActivation);
  }

  // Optimizer state (PyTorch reads it from the optimizer with its Python
  // tracer, and lets that override what the data flow said, which takes a
  // momentum buffer for a parameter): what the optimizer's step allocates
  // and keeps past its end, and what it writes that nothing outside an
  // optimizer step touches (state from before tracing); never a gradient.
  std::unordered_map<uint64_t, uint64_t> freed_at;  // key -> when it was freed
  for (const Moment& m : moments_)
    if (!m.alloc) freed_at[m.key] = m.ts_ns;
  std::unordered_set<uint64_t> outside_optimizer;
  for (const Node& node : nodes_) {
    if (node.optimizer_end_ns) continue;
    for (uint32_t r = node.reads; r < node.reads_end; ++r) outside_optimizer.insert(reads_[r].key);
    for (uint32_t a = node.allocs; a < node.allocs_end; ++a) outside_optimizer.insert(allocs_[a]);
  }
  for (size_t n = 0; n < flows.size(); ++n) {
    const Node& node = nodes_[n];
    if (!node.optimizer_end_ns) continue;
    std::vector<uint64_t> state;
    for (uint32_t a = node.allocs; a < node.allocs_end; ++a) {
      uint64_t key = allocs_[a];
      auto freed = freed_at.find(key);
      if (freed == freed_at.end() || freed->second > node.optimizer_end_ns) state.push_back(key);  // kept
    }
    for (const auto& [key, version] : flows[n].bumped)
      if (!outside_optimizer.count(key)) state.push_back(key);
    for (uint64_t key : state) {  // a gradient is one by id, whatever its version
      auto known = by_id.find(key);
      if (known == by_id.end() || known->second != C::kGradient) by_id[key] = C::kOptimizerState;
    }
  }

  // Autograd details: made in the backward pass from nothing known.
  for (size_t n = 0; n < flows.size(); ++n) {
    if (!nodes_[n].backward) continue;
    for (const Version& v : flows[n].outputs) {
      C prior = v.second == 0 ? C::kUnknown : get(v.first, v.second - 1);
      if (v.second == 0 || prior == C::kUnknown || prior == C::kAutogradDetail)
        setdefault_by_version(v, C::kAutogradDetail);
    }
  }

  MemoryCategoryResult result;
  // Each allocation this chunk knows: its category by version (from its
  // version when the chunk began).
  std::unordered_map<uint64_t, uint32_t> base;  // key -> its counted version when the chunk began
  for (const auto& [key, live] : live_) base[key] = live.version;
  auto known = [&](uint64_t key) {
    auto it = keys_.find(key);
    return it != keys_.end() && it->second.id ? &it->second : nullptr;
  };
  std::set<uint64_t> seen;
  for (const Flow& f : flows) {
    for (const Version& v : f.inputs) seen.insert(v.first);
    for (const Version& v : f.outputs) seen.insert(v.first);
  }
  for (const Moment& m : moments_) seen.insert(m.key);
  for (uint64_t key : seen) {
    const KeyInfo* k = known(key);
    if (!k) continue;
    std::vector<C>& versions = result.categories[{k->pid, k->id}];
    uint32_t from = base.count(key) ? base[key] : 0;
    versions.resize(from, C::kUnknown);
    for (uint32_t v = 0; v <= active[key]; ++v) versions.push_back(get(key, v));
  }

  // The bytes of each category over time: allocations, frees and version
  // bumps in order, from the counts the last chunk left.
  struct Step {
    uint64_t ts_ns;
    uint64_t key;
    int kind;  // 0 alloc, 1 bump, 2 free
  };
  std::vector<Step> steps;
  for (const Moment& m : moments_)
    if (known(m.key)) steps.push_back({m.ts_ns, m.key, m.alloc ? 0 : 2});
  for (size_t n = 0; n < flows.size(); ++n)
    for (const auto& [key, from] : flows[n].bumped)
      if (known(key)) steps.push_back({nodes_[n].begin_ns, key, 1});
  std::stable_sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) {
    return a.ts_ns != b.ts_ns ? a.ts_ns < b.ts_ns : a.kind < b.kind;
  });
  auto change = [&](uint64_t ts, const KeyInfo& k, C c, int64_t delta) {
    if (delta == 0) return;
    uint64_t& value = bytes_[{k.pid, k.device}][static_cast<int>(c)];
    value = static_cast<uint64_t>(static_cast<int64_t>(value) + delta);
    result.changes.push_back({ts, k.pid, k.device, c, value});
  };
  // What this chunk found for allocations alive before it: moved at its start
  // (when it found something: one it never saw keeps its category).
  uint64_t start = steps.empty() ? last_ns_ : steps.front().ts_ns;
  for (auto& [key, live] : live_) {
    const KeyInfo* k = known(key);
    if (!k || !seen.count(key)) continue;
    C now = get(key, 0);
    if (now == C::kUnknown || now == live.category) continue;
    change(start, *k, live.category, -static_cast<int64_t>(k->bytes));
    change(start, *k, now, static_cast<int64_t>(k->bytes));
    live.category = now;
  }
  for (const Step& s : steps) {
    const KeyInfo& k = *known(s.key);
    int64_t n = static_cast<int64_t>(k.bytes);
    uint32_t from = base.count(s.key) ? base[s.key] : 0;
    if (s.kind == 0) {
      C c = get(s.key, 0);
      live_[s.key] = Live{0, c};
      base[s.key] = 0;
      change(s.ts_ns, k, c, n);
    } else if (s.kind == 1) {
      auto live = live_.find(s.key);
      if (live == live_.end()) continue;
      result.bumps.push_back({s.ts_ns, {k.pid, k.id}, live->second.version, k.bytes});
      ++live->second.version;
      C after = get(s.key, live->second.version - from);
      if (after != live->second.category && after != C::kUnknown) {
        change(s.ts_ns, k, live->second.category, -n);
        change(s.ts_ns, k, after, n);
        live->second.category = after;
      }
    } else {
      auto live = live_.find(s.key);
      if (live == live_.end()) continue;
      change(s.ts_ns, k, live->second.category, -n);
      live_.erase(live);
    }
  }
  return result;
}

void MemoryCategories::Forget(uint64_t now_ns) {
  nodes_.clear();
  reads_.clear();
  allocs_.clear();
  frees_.clear();
  moments_.clear();
  // Lives freed long ago: no tree still to come names them.
  uint64_t horizon = now_ns > kLivesHorizonNs ? now_ns - kLivesHorizonNs : 0;
  std::unordered_set<uint64_t> referenced;
  PruneFreed(lives_, horizon, referenced);
  PruneFreed(preexisting_, horizon, referenced);
  for (const auto& [who, events] : waiting_)
    for (const MemoryEvent& e : events) {
      auto it = key_of_id_.find(OfId(e.pid, e.id));
      if (it != key_of_id_.end()) referenced.insert(it->second);
    }
  for (const auto& [key, live] : live_) referenced.insert(key);
  for (auto it = keys_.begin(); it != keys_.end();) {
    if (referenced.count(it->first)) {
      ++it;
      continue;
    }
    if (it->second.id) key_of_id_.erase(OfId(it->second.pid, it->second.id));
    it = keys_.erase(it);
  }
}

void MemoryCategories::RunChunk() {
  MemoryCategoryResult result = InferChunk();
  for (MemoryCategorySink* sink : also_) sink->AddMemoryCategories(result);
  Forget(last_ns_);
}

bool MemoryCategories::Finish(const TraceStats& stats, std::string* error) {
  if (!disabled_) {
    for (auto& [who, events] : waiting_) FlushLoose(who.first, who.second, UINT64_MAX);
    RunChunk();
  }
  return next_->Finish(stats, error);
}

}  // namespace torchprobe
