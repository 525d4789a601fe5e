// The allocation table; see the header.
#include "userspace/model/memory_model.h"

namespace torchprobe {
namespace {

// glibc's malloc_chunk size word: the size in multiples of 16 on x86-64,
// flags in the low 3 bits.
constexpr uint64_t kChunkFlags = 7;
constexpr uint64_t kChunkMmapped = 2;   // IS_MMAPPED: prev_size is part of the header
constexpr uint64_t kChunkMinSize = 32;  // MINSIZE
constexpr uint64_t kChunkMaxSize = 1ull << 46;  // more than any address space holds

MemoryEvent FromProbe(const tp_mem_event& e, MemoryEvent::Kind kind, uint32_t op_id) {
  MemoryEvent out;
  out.kind = kind;
  out.pid = e.hdr.pid;
  out.tid = e.hdr.tid;
  out.ts_ns = e.hdr.ts_ns;
  out.address = e.address;
  out.op_id = op_id;
  return out;
}

}  // namespace

uint64_t MemoryModel::ChunkUsableBytes(uint64_t word) {
  uint64_t size = word & ~kChunkFlags;
  if (size < kChunkMinSize || size >= kChunkMaxSize || size % 16 != 0) return 0;
  return size - ((word & kChunkMmapped) ? 16 : 8);
}

void MemoryModel::OnEvent(const tp_mem_event& event, uint32_t op_id, std::shared_ptr<const PythonStack> python) {
  if (event.address == 0) return;  // nothing allocated, nothing freed
  Process& p = ProcessOf(event.hdr.pid);
  if (event.hdr.type == EV_MEM_ALLOC) Alloc(p, event, op_id, std::move(python));
  else if (event.hdr.type == EV_MEM_FREE) Free(p, event, op_id);
  else Segment(p, event, op_id);
}

MemoryModel::Process& MemoryModel::ProcessOf(uint32_t pid) {
  auto [it, first] = processes_.try_emplace(pid);
  if (first && tracks_) tracks_->AddProcess(names_->Process(pid));
  return it->second;
}

void MemoryModel::OnDeviceEvent(const tp_device_mem_event& event, uint32_t op_id,
                                std::shared_ptr<const PythonStack> python) {
  if (event.bytes == 0) return;
  Process& p = ProcessOf(event.hdr.pid);
  uint16_t device = static_cast<uint16_t>((event.device_type << 8) | static_cast<uint8_t>(event.device_index));
  auto key = std::make_pair(device, event.address);
  bool alloc = event.bytes > 0;
  MemoryEvent out;
  out.pid = event.hdr.pid;
  out.tid = event.hdr.tid;
  out.ts_ns = event.hdr.ts_ns;
  out.address = event.address;
  out.bytes = static_cast<uint64_t>(alloc ? event.bytes : -event.bytes);
  out.op_id = op_id;
  out.allocated = event.total_allocated;
  out.reserved = event.total_reserved;
  out.device_type = event.device_type;
  out.device_index = event.device_index;
  ++stats_->device_events;
  if (alloc) {
    Allocation& a = p.device_live[key];
    a = Allocation{p.next_id++, out.bytes, event.hdr.ts_ns, op_id};
    out.kind = MemoryEvent::kAlloc;
    out.id = a.id;
    out.alloc_op_id = op_id;
    out.alloc_ts_ns = a.ts_ns;
    out.python = std::move(python);
  } else if (auto it = p.device_live.find(key); it != p.device_live.end()) {
    out.kind = MemoryEvent::kFree;
    out.id = it->second.id;
    out.alloc_op_id = it->second.op_id;
    out.alloc_ts_ns = it->second.ts_ns;
    p.device_live.erase(it);
  } else {
    out.kind = MemoryEvent::kPreexistingFree;  // the allocator knows its size
    out.id = p.next_id++;
  }
  sink_->AddMemoryEvent(out);
}

void MemoryModel::Alloc(Process& p, const tp_mem_event& event, uint32_t op_id,
                        std::shared_ptr<const PythonStack> python) {
  ++stats_->allocations;
  auto [it, inserted] = p.live.try_emplace(event.address);
  if (!inserted) {
    // The same address again without a free between: its free was lost.
    ++stats_->lost_frees;
    p.allocated -= it->second.bytes;
    MemoryEvent lost = FromProbe(event, MemoryEvent::kFree, op_id);
    lost.bytes = it->second.bytes;
    lost.id = it->second.id;
    lost.alloc_op_id = it->second.op_id;
    lost.alloc_ts_ns = it->second.ts_ns;
    lost.allocated = p.allocated;
    sink_->AddMemoryEvent(lost);  // the free, late: the counter must not count it twice
  }
  Allocation& a = it->second;
  a.id = p.next_id++;
  a.bytes = event.bytes;
  a.ts_ns = event.hdr.ts_ns;
  a.op_id = op_id;
  p.allocated += a.bytes;
  MemoryEvent out = FromProbe(event, MemoryEvent::kAlloc, op_id);
  out.bytes = a.bytes;
  out.id = a.id;
  out.alloc_op_id = op_id;
  out.alloc_ts_ns = a.ts_ns;
  out.allocated = p.allocated;
  out.python = std::move(python);
  sink_->AddMemoryEvent(out);
}

void MemoryModel::Free(Process& p, const tp_mem_event& event, uint32_t op_id) {
  ++stats_->frees;
  auto it = p.live.find(event.address);
  if (it == p.live.end()) {
    MemoryEvent out = FromProbe(event, MemoryEvent::kPreexistingFree, op_id);
    out.bytes = ChunkUsableBytes(event.bytes);
    out.id = p.next_id++;
    ++stats_->preexisting_frees;
    if (out.bytes == 0) ++stats_->preexisting_unsized;
    out.allocated = p.allocated;
    sink_->AddMemoryEvent(out);
    return;
  }
  const Allocation& a = it->second;
  p.allocated -= a.bytes;
  MemoryEvent out = FromProbe(event, MemoryEvent::kFree, op_id);
  out.bytes = a.bytes;
  out.id = a.id;
  out.alloc_op_id = a.op_id;
  out.alloc_ts_ns = a.ts_ns;
  out.allocated = p.allocated;
  p.live.erase(it);
  sink_->AddMemoryEvent(out);
}

void MemoryModel::Segment(Process& p, const tp_mem_event& event, uint32_t op_id) {
  ++stats_->segment_events;
  MemoryEvent out = FromProbe(event, MemoryEvent::kAlloc, op_id);
  out.segment = true;
  out.device_type = 1;  // CUDA, on whichever device was current
  if (event.hdr.type == EV_SEGMENT_ALLOC) {
    p.segment_bytes += event.bytes - p.segments[event.address];
    p.segments[event.address] = event.bytes;
    out.bytes = event.bytes;
  } else if (auto it = p.segments.find(event.address); it != p.segments.end()) {
    out.kind = MemoryEvent::kFree;
    out.bytes = it->second;
    p.segment_bytes -= it->second;
    p.segments.erase(it);
  } else {
    out.kind = MemoryEvent::kPreexistingFree;  // size unknown: 0
  }
  out.allocated = p.segment_bytes;
  sink_->AddMemoryEvent(out);
}

void MemoryModel::Finish() {
  for (const auto& [pid, p] : processes_) stats_->memory_alive_at_end += p.live.size() + p.device_live.size();
}

}  // namespace torchprobe
