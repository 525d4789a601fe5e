// The caching allocator's snapshot from its reports; see the header.
#include "userspace/export/memory_snapshot.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "userspace/export/pickle_writer.h"

namespace torchprobe {
namespace {

constexpr uint64_t kSmallSegment = 2ull << 20;  // the small pool's segments (kSmallBuffer)

const char* ActionName(int action) {
  static constexpr const char* kNames[] = {"alloc", "free_requested", "segment_alloc", "segment_free"};
  return kNames[action];
}

// Frames as the snapshot lists them: innermost first.
void Frames(PickleWriter& w, const PythonStack* stack) {
  w.List();
  if (stack)
    for (auto f = stack->frames.rbegin(); f != stack->frames.rend(); ++f)
      w.Dict()
          .Key("filename").Str(f->code->file)
          .Key("line").Int(f->line)
          .Key("name").Str(f->code->function)
          .EndDict();
  w.EndList();
}

std::string PathFor(const std::string& path, uint32_t pid) {
  return path.substr(0, path.size() - 7) + "." + std::to_string(pid) + ".pickle";
}

}  // namespace

std::unique_ptr<MemorySnapshot> MemorySnapshot::Open(const std::string& path, int64_t realtime_offset_ns,
                                                     std::string* error) {
  if (path.size() <= 7 || path.compare(path.size() - 7, 7, ".pickle") != 0) {
    *error = "--memory-snapshot " + path + ": the name must end in .pickle";
    return nullptr;
  }
  std::unique_ptr<AtomicFile> file = AtomicFile::Open(path, error);
  if (!file) return nullptr;
  return std::unique_ptr<MemorySnapshot>(new MemorySnapshot(std::move(file), path, realtime_offset_ns));
}

void MemorySnapshot::AddMemoryEvent(const MemoryEvent& e) {
  if (e.device_type == 0) return;  // CPU memory: not the caching allocator's
  auto [it, first] = processes_.try_emplace(e.pid);
  if (first) order_.push_back(e.pid);
  Process& p = it->second;
  Trace t;
  t.address = e.address;
  t.bytes = e.bytes;
  t.ts_ns = e.ts_ns;
  t.tid = e.tid;
  t.id = e.id;
  if (e.segment) {
    t.action = e.kind == MemoryEvent::kAlloc ? Trace::kSegmentAlloc : Trace::kSegmentFree;
    if (t.action == Trace::kSegmentAlloc) p.segments[e.address] = e.bytes;
    else p.segments.erase(e.address);
  } else {
    t.device = e.device_index;
    t.action = e.kind == MemoryEvent::kAlloc ? Trace::kAlloc : Trace::kFree;
    auto key = std::make_pair(static_cast<int>(e.device_index), e.address);
    if (t.action == Trace::kAlloc) {
      t.python = e.python;
      p.blocks[key] = Block{e.bytes, e.python};
    } else if (auto block = p.blocks.find(key); block != p.blocks.end()) {
      t.python = block->second.python;  // a free lists the frames of its allocation
      p.blocks.erase(block);
    }
  }
  p.traces.push_back(std::move(t));
}

void MemorySnapshot::AddMemoryCategories(const MemoryCategoryResult& result) {
  for (const auto& [key, versions] : result.categories)
    if (!versions.empty() && versions.front() != MemoryCategory::kUnknown && processes_.count(key.first))
      categories_[key] = versions.front();
}

std::map<uint64_t, int> MemorySnapshot::PlaceSegments(Process& p) {
  // Every block ever reported, by address: a segment holds blocks of its own device only.
  std::vector<std::pair<uint64_t, int>> blocks;
  for (const Trace& t : p.traces)
    if (t.action == Trace::kAlloc) blocks.emplace_back(t.address, t.device);
  std::sort(blocks.begin(), blocks.end());
  std::map<uint64_t, int> segment_device;  // by address, for the frees
  for (size_t i = 0; i < p.traces.size(); ++i) {
    Trace& t = p.traces[i];
    if (t.action == Trace::kSegmentFree) {
      auto known = segment_device.find(t.address);
      if (known != segment_device.end()) {
        t.device = known->second;
        continue;
      }
    }
    if (t.action != Trace::kSegmentAlloc && t.action != Trace::kSegmentFree) continue;
    auto inside = std::lower_bound(blocks.begin(), blocks.end(), std::make_pair(t.address, -1));
    if (inside != blocks.end() && t.bytes && inside->first < t.address + t.bytes) {
      t.device = inside->second;
    } else {  // no block carved from it: its thread's next report, else its last
      for (size_t j = i + 1; j < p.traces.size() && t.device < 0; ++j)
        if (p.traces[j].tid == t.tid && p.traces[j].action <= Trace::kFree) t.device = p.traces[j].device;
      for (size_t j = i; j-- > 0 && t.device < 0;)
        if (p.traces[j].tid == t.tid && p.traces[j].action <= Trace::kFree) t.device = p.traces[j].device;
    }
    if (t.device < 0) t.device = 0;
    if (t.action == Trace::kSegmentAlloc) segment_device[t.address] = t.device;
  }
  return segment_device;
}

std::string MemorySnapshot::Pickled(uint32_t pid) {
  Process empty;
  auto found = processes_.find(pid);
  Process& p = found == processes_.end() ? empty : found->second;
  std::map<uint64_t, int> segment_device = PlaceSegments(p);
  int devices = 0;
  for (const Trace& t : p.traces) devices = std::max(devices, t.device + 1);
  PickleWriter w;
  w.Dict().Key("segments").List();
  // Each live segment with the live blocks inside it; blocks outside every
  // live segment get one each (their segment was allocated before tracing).
  auto block = p.blocks.begin();
  auto write_block = [&w](uint64_t address, uint64_t bytes, bool active, const PythonStack* python) {
    w.Dict()
        .Key("address").UInt(address)
        .Key("size").UInt(bytes)
        .Key("requested_size").UInt(active ? bytes : 0)
        .Key("state").Str(active ? "active_allocated" : "inactive")
        .Key("frames");
    Frames(w, python);
    w.EndDict();
  };
  auto write_segment = [&](int device, uint64_t address, uint64_t bytes, uint64_t active,
                           const std::vector<std::pair<uint64_t, const Block*>>& live) {
    w.Dict()
        .Key("device").Int(device)
        .Key("address").UInt(address)
        .Key("total_size").UInt(bytes)
        .Key("allocated_size").UInt(active)
        .Key("active_size").UInt(active)
        .Key("requested_size").UInt(active)
        .Key("stream").Int(0)
        .Key("segment_type").Str(bytes <= kSmallSegment ? "small" : "large")
        .Key("segment_pool_id").Tuple().Int(0).Int(0).EndTuple()
        .Key("is_expandable").Bool(false)
        .Key("frames").List().EndList()
        .Key("blocks").List();
    uint64_t at = address;
    for (const auto& [start, b] : live) {
      if (start > at) write_block(at, start - at, false, nullptr);
      write_block(start, b->bytes, true, b->python.get());
      at = start + b->bytes;
    }
    if (address + bytes > at) write_block(at, address + bytes - at, false, nullptr);
    w.EndList().EndDict();
  };
  std::set<std::pair<int, uint64_t>> placed;
  for (const auto& [address, bytes] : p.segments) {
    int device = segment_device.count(address) ? segment_device[address] : 0;
    std::vector<std::pair<uint64_t, const Block*>> live;
    uint64_t active = 0, end = address;
    for (block = p.blocks.lower_bound({device, address});
         block != p.blocks.end() && block->first.first == device && block->first.second < address + bytes; ++block) {
      if (block->first.second < end || block->first.second + block->second.bytes > address + bytes) continue;
      live.emplace_back(block->first.second, &block->second);
      active += block->second.bytes;
      end = block->first.second + block->second.bytes;
      placed.insert(block->first);
    }
    write_segment(device, address, bytes, active, live);
  }
  uint64_t outside = 0;
  for (const auto& [key, b] : p.blocks) {
    if (placed.count(key)) continue;
    ++outside;
    write_segment(key.first, key.second, b.bytes, b.bytes, {{key.second, &b}});
  }
  w.EndList();
  w.Key("device_traces").List();
  for (int device = 0; device < devices; ++device) {
    w.List();
    for (const Trace& t : p.traces) {
      if (t.device != device) continue;
      // A free is requested and completed at once: the stream-deferred completion is not seen.
      for (int twice = 0; twice < (t.action == Trace::kFree ? 2 : 1); ++twice) {
        w.Dict()
            .Key("action").Str(twice ? "free_completed" : ActionName(t.action))
            .Key("addr").UInt(t.address)
            .Key("size").UInt(t.bytes)
            .Key("stream").Int(0)
            .Key("time_us").Int((static_cast<int64_t>(t.ts_ns) + realtime_offset_ns_) / 1000)
            .Key("frames");
        Frames(w, t.python.get());
        if (auto c = categories_.find({pid, t.id}); t.action == Trace::kAlloc && c != categories_.end()) {
          std::string name = MemoryCategoryName(c->second);
          for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
          w.Key("category").Str(name);
        }
        w.EndDict();
      }
    }
    w.EndList();
  }
  w.EndList();
  w.Key("allocator_settings").Dict().EndDict();
  w.Key("torchprobe").Dict().Key("blocks_outside_segments").UInt(outside).EndDict();
  w.EndDict();
  return w.Finish();
}

bool MemorySnapshot::Finish(std::string* error) {
  std::string text = Pickled(order_.empty() ? 0 : order_.front());
  file_->Write(text.data(), text.size());
  if (!file_->Commit(error)) return false;
  for (size_t i = 1; i < order_.size(); ++i) {
    std::unique_ptr<AtomicFile> file = AtomicFile::Open(PathFor(path_, order_[i]), error);
    if (!file) return false;
    text = Pickled(order_[i]);
    file->Write(text.data(), text.size());
    if (!file->Commit(error)) return false;
  }
  return true;
}

}  // namespace torchprobe
