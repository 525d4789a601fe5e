// PyTorch's memory categories from the data flow between ops; see the header
// (the passes follow torch/profiler/_memory_profiler.py's MemoryProfile).
#include "userspace/model/memory_categories.h"

#include <algorithm>
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
  bool seen = false;
  bool allocation() const { return !has_input; }
  bool deletion() const { return mutated == kFreed; }
};

using Version = std::pair<uint64_t, uint32_t>;  // (key, version)

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
  keys_.push_back(KeyInfo{pid, id, bytes, device});
  return keys_.size() - 1;
}

uint64_t MemoryCategories::KeyOf(uint32_t pid, uint64_t id, uint64_t bytes, int16_t device) {
  auto [it, inserted] = key_of_id_.try_emplace({pid, id}, 0);
  if (inserted) it->second = NewKey(pid, id, bytes, device);
  return it->second;
}

uint64_t MemoryCategories::KeyAt(uint32_t pid, uint64_t address, uint64_t ts_ns) {
  if (auto lives = lives_.find({pid, address}); lives != lives_.end())
    for (auto life = lives->second.rbegin(); life != lives->second.rend(); ++life)
      if (life->alloc_ns <= ts_ns && ts_ns <= life->free_ns) return KeyOf(pid, life->id, life->bytes, life->device);
  // Not allocated while tracing: memory from before, one key until its free.
  ++unjoined_;
  std::vector<Preexisting>& before = preexisting_[{pid, address}];
  for (const Preexisting& p : before)
    if (ts_ns <= p.free_ns) return p.key;
  before.push_back({NewKey(pid, 0, 0, -1), UINT64_MAX});
  return before.back().key;
}

uint64_t MemoryCategories::KeyOfEvent(const MemoryEvent& e) {
  int16_t device = e.device_type == 0 ? -1 : e.device_index;
  if (e.kind != MemoryEvent::kPreexistingFree) return KeyOf(e.pid, e.id, e.bytes, device);
  std::vector<Preexisting>& before = preexisting_[{e.pid, e.address}];
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
  if (e.segment) return;  // the caching allocator's segments hold no tensor of their own
  if (e.kind == MemoryEvent::kAlloc) {
    int16_t device = e.device_type == 0 ? -1 : e.device_index;
    KeyOf(e.pid, e.id, e.bytes, device);
    lives_[{e.pid, e.address}].push_back(Life{e.id, e.ts_ns, UINT64_MAX, e.bytes, device});
  } else if (e.kind == MemoryEvent::kFree) {
    for (Life& life : lives_[{e.pid, e.address}])
      if (life.id == e.id) life.free_ns = e.ts_ns;
  }
  waiting_[{e.pid, e.tid}].push_back(e);
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
    uint64_t key = KeyOfEvent(e);
    (e.kind == MemoryEvent::kAlloc ? node.allocs : node.frees).push_back(key);
    moments_.push_back({e.ts_ns, key, e.kind == MemoryEvent::kAlloc});
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
    uint64_t key = KeyOfEvent(e);
    (e.kind == MemoryEvent::kAlloc ? node.allocs : node.frees).push_back(key);
    moments_.push_back({e.ts_ns, key, e.kind == MemoryEvent::kAlloc});
    nodes_.push_back(std::move(node));
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
    for (size_t j = i; j < end; ++j) {
      if (!slices[j].inputs || slices[j].op_id >= ops_->size()) continue;
      bool schema = !(*ops_)[slices[j].op_id].schema.empty();
      for (const OpInput& in : slices[j].inputs->args) {
        if (in.kind != OpInput::kTensor || in.storage_data == 0) continue;
        node.reads.push_back(
            {KeyAt(pid, in.storage_data, slices[j].begin_ns), static_cast<int8_t>(schema ? in.mutated : -1)});
      }
    }
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
    TakeEvents(pid, tid, node);
    nodes_.push_back(std::move(node));
    i = end;
  }
}

void MemoryCategories::AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) {
  if (!slices.empty()) {
    FlushLoose(pid, tid, slices.front().begin_ns);
    AddNodes(pid, tid, slices);
    FlushLoose(pid, tid, slices.front().end_ns + 1);  // inside the tree but in no op
  }
  next_->AddSliceTree(pid, tid, slices);
}

MemoryCategoryResult MemoryCategories::Infer() {
  for (auto& [who, events] : waiting_) FlushLoose(who.first, who.second, UINT64_MAX);
  std::stable_sort(nodes_.begin(), nodes_.end(), [](const Node& a, const Node& b) { return a.begin_ns < b.begin_ns; });

  // The data flow graph: each node's inputs, outputs and intermediates with
  // versions (DataFlowGraph, DataFlowNode._determine_edges).
  struct Flow {
    std::vector<Version> inputs, outputs;
    std::vector<uint64_t> intermediates;
    std::vector<std::pair<uint64_t, uint32_t>> bumped;  // written: (key, version before)
  };
  std::vector<Flow> flows(nodes_.size());
  std::vector<uint32_t> active(keys_.size(), 0);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    std::map<uint64_t, FlowEdge> edges;
    std::map<uint64_t, std::set<int8_t>> mutable_by_key;
    for (const Edge& read : node.reads) mutable_by_key[read.key].insert(read.mutated);
    for (const auto& [key, marks] : mutable_by_key) {
      FlowEdge& e = edges[key];
      e.has_input = true;
      e.input_version = active[key];
      bool written = marks.count(1) || (marks.size() == 1 && marks.count(-1));
      e.mutated = written ? FlowEdge::kWritten : FlowEdge::kRead;
    }
    for (uint64_t key : node.frees) {
      FlowEdge& e = edges[key];
      e.mutated = FlowEdge::kFreed;
      e.has_input = true;
      e.input_version = active[key];
    }
    for (uint64_t key : node.allocs) edges[key].has_input = false;
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

  // Inputs: take part in computing a gradient, never depend on one.
  {
    std::set<uint64_t> depends = depends_on_gradient();
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
    std::set<uint64_t> depends = depends_on_gradient(), parameters;
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
  std::vector<bool> outside_optimizer(keys_.size(), false);
  for (const Node& node : nodes_) {
    if (node.optimizer_end_ns) continue;
    for (const Edge& read : node.reads) outside_optimizer[read.key] = true;
    for (uint64_t key : node.allocs) outside_optimizer[key] = true;
  }
  for (size_t n = 0; n < flows.size(); ++n) {
    const Node& node = nodes_[n];
    if (!node.optimizer_end_ns) continue;
    std::vector<uint64_t> state;
    for (uint64_t key : node.allocs) {
      auto freed = freed_at.find(key);
      if (freed == freed_at.end() || freed->second > node.optimizer_end_ns) state.push_back(key);  // kept
    }
    for (const auto& [key, version] : flows[n].bumped)
      if (!outside_optimizer[key]) state.push_back(key);
    for (uint64_t key : state) {
      bool gradient = false;
      for (uint32_t v = 0; v <= active[key]; ++v) gradient |= is({key, v}, {C::kGradient});
      if (!gradient) by_id[key] = C::kOptimizerState;
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
  result.nodes = nodes_.size();
  result.inputs_unjoined = unjoined_;
  for (uint64_t key = 0; key < keys_.size(); ++key) {
    const KeyInfo& k = keys_[key];
    if (k.id == 0) continue;  // allocated before tracing: not in the trace's memory
    std::vector<C>& versions = result.categories[{k.pid, k.id}];
    for (uint32_t v = 0; v <= active[key]; ++v) versions.push_back(get(key, v));
  }
  for (size_t n = 0; n < flows.size(); ++n)
    for (const auto& [key, from] : flows[n].bumped)
      if (keys_[key].id) result.bumps.push_back({nodes_[n].begin_ns, {keys_[key].pid, keys_[key].id}, from, keys_[key].bytes});
  std::stable_sort(result.bumps.begin(), result.bumps.end(),
                   [](const auto& a, const auto& b) { return a.ts_ns < b.ts_ns; });

  // The bytes of each category over time: allocations, frees and version bumps in order.
  struct Step {
    uint64_t ts_ns;
    uint64_t key;
    int kind;  // 0 alloc, 1 bump, 2 free
    uint32_t from;
  };
  std::vector<Step> steps;
  for (const Moment& m : moments_)
    if (keys_[m.key].id) steps.push_back({m.ts_ns, m.key, m.alloc ? 0 : 2, 0});
  for (size_t n = 0; n < flows.size(); ++n)
    for (const auto& [key, from] : flows[n].bumped)
      if (keys_[key].id) steps.push_back({nodes_[n].begin_ns, key, 1, from});
  std::stable_sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) {
    return a.ts_ns != b.ts_ns ? a.ts_ns < b.ts_ns : a.kind < b.kind;
  });
  std::map<std::pair<uint32_t, int16_t>, std::array<uint64_t, kMemoryCategories>> bytes;
  std::unordered_map<uint64_t, uint32_t> version;  // the live keys' current versions
  auto change = [&](uint64_t ts, const KeyInfo& k, C c, int64_t delta) {
    if (delta == 0) return;
    auto& b = bytes[{k.pid, k.device}];
    uint64_t& value = b[static_cast<int>(c)];
    value = static_cast<uint64_t>(static_cast<int64_t>(value) + delta);
    result.changes.push_back({ts, k.pid, k.device, c, value});
  };
  for (const Step& s : steps) {
    const KeyInfo& k = keys_[s.key];
    int64_t n = static_cast<int64_t>(k.bytes);
    if (s.kind == 0) {
      version[s.key] = 0;
      change(s.ts_ns, k, get(s.key, 0), n);
    } else if (s.kind == 1) {
      auto live = version.find(s.key);
      if (live == version.end()) continue;
      C before = get(s.key, live->second), after = get(s.key, live->second + 1);
      ++live->second;
      if (before != after) {
        change(s.ts_ns, k, before, -n);
        change(s.ts_ns, k, after, n);
      }
    } else {
      auto live = version.find(s.key);
      if (live == version.end()) continue;
      change(s.ts_ns, k, get(s.key, live->second), -n);
      version.erase(live);
    }
  }
  return result;
}

bool MemoryCategories::Finish(const TraceStats& stats, std::string* error) {
  MemoryCategoryResult result = Infer();
  for (MemoryCategorySink* sink : also_) sink->AddMemoryCategories(result);
  return next_->Finish(stats, error);
}

}  // namespace torchprobe
