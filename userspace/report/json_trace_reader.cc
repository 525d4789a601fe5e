#include "userspace/report/json_trace_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "userspace/export/slice_category.h"
#include "userspace/report/json_value.h"

namespace torchprobe {

namespace {

// `annotation`: a record_function range or step, which report's op table
// leaves out as it does reading the Perfetto trace; so are autograd ranges
// (the JSON formats give them an op's category, slice_category.h).
uint32_t OpIndex(DecodedTrace* trace, std::unordered_map<std::string, uint32_t>* index,
                 const std::string& name, const std::string& schema, bool annotation) {
  auto [it, added] = index->emplace(name + '\0' + schema, static_cast<uint32_t>(trace->ops.size()));
  const char* category = annotation ? kUserAnnotation : CategoryOf(name).et_scope == 1 ? kAutogradNode : "";
  if (added) trace->ops.push_back({name, "", schema, category});
  return it->second;
}

DecodedThread& ThreadOf(DecodedTrace* trace, std::map<uint64_t, size_t>* threads, uint32_t pid, uint32_t tid) {
  auto [it, added] = threads->emplace(static_cast<uint64_t>(pid) << 32 | tid, trace->threads.size());
  if (added) {
    trace->threads.emplace_back();
    trace->threads.back().pid = pid;
    trace->threads.back().tid = tid;
  }
  return trace->threads[it->second];
}

void ReadStats(const JsonValue& root, DecodedTrace* trace) {
  const JsonValue* stats = root.Find("torchprobe_stats");
  if (!stats) return;
  trace->has_stats = true;
  for (const StatsField& field : kStatsFields)
    if (const JsonValue* v = stats->Find(field.name)) trace->stats.*field.value = static_cast<uint64_t>(v->integer);
  for (const auto& [name, value] : stats->members)  // a probe set's section
    if (name.find('.') != std::string::npos) trace->stats.Count(name) = static_cast<uint64_t>(value.integer);
  if (const JsonValue* mode = stats->Find("attach_mode")) trace->stats.attach_mode = mode->string;
}

// Depth and parent from the order of a thread's slices (pre-order) and their
// extents: a slice nests in the last open one that ends at or after its end.
void Nest(DecodedThread& thread) {
  std::vector<int32_t> open;
  for (size_t i = 0; i < thread.slices.size(); ++i) {
    DecodedSlice& s = thread.slices[i];
    while (!open.empty() && (thread.slices[open.back()].end_ns < s.end_ns ||
                             thread.slices[open.back()].end_ns <= s.begin_ns))
      open.pop_back();
    s.parent = open.empty() ? -1 : open.back();
    s.depth = static_cast<uint16_t>(open.size());
    open.push_back(static_cast<int32_t>(i));
  }
}

bool ReadChrome(const JsonValue& root, DecodedTrace* trace) {
  const JsonValue* events = root.Find("traceEvents");
  if (!events || events->kind != JsonValue::kArray) return false;
  std::unordered_map<std::string, uint32_t> ops;
  std::map<uint64_t, size_t> threads;
  std::map<uint32_t, std::string> process_names;
  for (const JsonValue& e : events->items) {
    const JsonValue* ph = e.Find("ph");
    const JsonValue* name = e.Find("name");
    const JsonValue* pid = e.Find("pid");
    const JsonValue* tid = e.Find("tid");
    if (!ph || !name || !pid || !tid) continue;
    uint32_t p = static_cast<uint32_t>(pid->integer), t = static_cast<uint32_t>(tid->integer);
    const JsonValue* args = e.Find("args");
    if (ph->string == "M") {
      const JsonValue* label = args ? args->Find("name") : nullptr;
      if (!label) continue;
      if (name->string == "process_name") process_names[p] = label->string;
      if (name->string == "thread_name") ThreadOf(trace, &threads, p, t).name = label->string;
      continue;
    }
    const JsonValue* ts = e.Find("ts");
    const JsonValue* dur = e.Find("dur");
    if (ph->string != "X" || !ts || !dur) continue;
    DecodedSlice s;
    s.begin_ns = static_cast<uint64_t>(std::llround(ts->number * 1000));
    s.end_ns = s.begin_ns + static_cast<uint64_t>(std::llround(dur->number * 1000));
    const JsonValue* cat = e.Find("cat");
    if (cat && IsGpuCategory(cat->string)) {  // Kineto's layout: pid = device, tid = stream
      DecodedGpuActivity g;
      g.begin_ns = s.begin_ns;
      g.end_ns = s.end_ns;
      g.name = name->string;
      g.category = cat->string;
      g.device = p;
      g.stream = t;
      g.track = (uint64_t{p} << 32) | t;
      const JsonValue* op = args ? args->Find("op") : nullptr;
      const JsonValue* correlation = args ? args->Find("correlation") : nullptr;
      if (op) g.op = op->string;
      if (correlation) g.correlation = static_cast<uint64_t>(correlation->integer);
      trace->gpu.push_back(std::move(g));
      continue;
    }
    s.op = OpIndex(trace, &ops, name->string, "", cat && cat->string == kUserAnnotation);
    if (args) {
      s.repaired_begin = args->Find("begin_unseen") != nullptr;
      s.repaired_end = args->Find("end_unseen") != nullptr;
      s.unwound = args->Find("unwound") != nullptr;
    }
    ThreadOf(trace, &threads, p, t).slices.push_back(s);
  }
  for (DecodedThread& thread : trace->threads) {
    std::stable_sort(thread.slices.begin(), thread.slices.end(), [](const DecodedSlice& a, const DecodedSlice& b) {
      return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
    });
    Nest(thread);
  }
  // A GPU's (pid = device) name events made it a process with empty threads.
  std::set<uint32_t> devices;
  for (const DecodedGpuActivity& g : trace->gpu) devices.insert(g.device);
  std::erase_if(trace->threads,
                [&devices](const DecodedThread& t) { return t.slices.empty() && devices.count(t.pid); });
  for (const auto& [pid, name] : process_names)
    if (!devices.count(pid) || trace->FindThread(pid, 0) || name.rfind("GPU ", 0) != 0)
      trace->processes.push_back({pid, name, ""});
  return true;
}

bool ReadExecutionTrace(const JsonValue& root, DecodedTrace* trace) {
  const JsonValue* nodes = root.Find("nodes");
  if (!nodes || nodes->kind != JsonValue::kArray) return false;
  struct Node {
    std::string name, schema;
    int64_t parent = 0;
    uint32_t tid = 0;
    int64_t scope = -1;  // at::RecordScope; 7: a user annotation (record_function)
  };
  std::map<int64_t, Node> by_id;  // ids are handed out at entry: id order is pre-order
  for (const JsonValue& n : nodes->items) {
    const JsonValue* id = n.Find("id");
    const JsonValue* name = n.Find("name");
    const JsonValue* parent = n.Find("ctrl_deps");
    if (!id || !name || !parent) continue;
    Node node{name->string, "", parent->integer, 0};
    if (const JsonValue* attrs = n.Find("attrs")) {
      for (const JsonValue& a : attrs->items) {
        const JsonValue* key = a.Find("name");
        const JsonValue* value = a.Find("value");
        if (!key || !value) continue;
        if (key->string == "op_schema") node.schema = value->string;
        if (key->string == "tid") node.tid = static_cast<uint32_t>(value->integer);
        if (key->string == "scope") node.scope = value->integer;
      }
    }
    by_id[id->integer] = std::move(node);
  }
  if (const JsonValue* pid = root.Find("pid"))
    trace->processes.push_back({static_cast<uint32_t>(pid->integer), "", ""});
  uint32_t pid = trace->processes.empty() ? 0 : trace->processes[0].pid;
  std::unordered_map<std::string, uint32_t> ops;
  std::map<uint64_t, size_t> threads;
  std::map<int64_t, std::pair<DecodedThread*, int32_t>> placed;  // node id -> thread, slice index
  for (const auto& [id, node] : by_id) {
    if (node.name.rfind("[pytorch|profiler|", 0) == 0) continue;
    auto parent = placed.find(node.parent);
    DecodedThread* thread;
    DecodedSlice s;
    s.op = OpIndex(trace, &ops, node.name, node.schema, node.scope == 7);
    if (parent != placed.end()) {
      thread = parent->second.first;
      s.parent = parent->second.second;
      s.depth = static_cast<uint16_t>(thread->slices[s.parent].depth + 1);
    } else {
      thread = &ThreadOf(trace, &threads, pid, node.tid);
    }
    thread->slices.push_back(s);
    placed[id] = {thread, static_cast<int32_t>(thread->slices.size() - 1)};
  }
  return true;
}

}  // namespace

bool LooksLikeJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c;
  while (in.get(c))
    if (!std::strchr(" \t\r\n", c)) return c == '{';
  return false;
}

bool ReadJsonTrace(const std::string& path, DecodedTrace* trace, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string data = text.str();
  trace->file_size = data.size();
  JsonValue root;
  std::string parse_error;
  if (!ParseJson(data, &root, &parse_error)) {
    *error = path + " is not valid JSON: " + parse_error;
    return false;
  }
  // Threads are placed by pointer while an ET is read: no reallocation.
  trace->threads.reserve(4096);
  if (!ReadChrome(root, trace) && !ReadExecutionTrace(root, trace)) {
    *error = path + " is JSON but neither a Chrome trace (traceEvents) nor an execution trace (nodes)";
    return false;
  }
  ReadStats(root, trace);
  return true;
}

}  // namespace torchprobe
