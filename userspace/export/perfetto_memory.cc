// PerfettoWriter's memory tracks (--memory); see perfetto_writer.h. Written
// on the global sequence with explicit MONOTONIC timestamps: they arrive as
// the probes fire, while op slices arrive a finished tree at a time, and
// trace_processor sorts the two.
#include <algorithm>

#include "userspace/export/perfetto_writer.h"

namespace torchprobe {
namespace {

// Upstream field numbers (schemas/perfetto_trace.proto) of what is written
// here only; the rest are perfetto_writer.cc's.
enum : uint32_t {
  kPacket = 1,             // Trace.packet
  kPacketTimestamp = 8,
  kPacketSequenceId = 10,
  kPacketTrackEvent = 11,
  kPacketClockId = 58,
  kPacketTrackDescriptor = 60,
  kDescriptorUuid = 1,
  kDescriptorName = 2,
  kDescriptorParentUuid = 5,
  kDescriptorCounter = 8,
  kDescriptorDescription = 14,
  kCounterUnit = 3,
  kEventAnnotations = 4,
  kEventKind = 9,
  kEventTrack = 11,
  kEventCategory = 22,
  kEventNameString = 23,
  kEventCounterValue = 30,
  kArgName = 10,
  kArgBool = 2,
  kArgUint = 3,
  kArgString = 6,
  kArgPointer = 7,
};
enum : uint32_t {
  kUnitSizeBytes = 3,
  kKindInstant = 3,
  kKindCounter = 4,
  kMonotonic = 3,
};

}  // namespace

void PerfettoWriter::DescribeMemoryTracks(uint32_t pid) {
  if (memory_tracks_[pid]) return;
  memory_tracks_[pid] = true;
  auto track = [this, pid](uint64_t uuid, const char* name, const char* description, bool counter) {
    size_t packet = encoder_.BeginNested(kPacket);
    encoder_.Varint(kPacketSequenceId, kGlobalSequenceId);
    size_t d = encoder_.BeginNested(kPacketTrackDescriptor);
    encoder_.Varint(kDescriptorUuid, uuid);
    encoder_.Varint(kDescriptorParentUuid, ProcessUuid(pid));
    encoder_.String(kDescriptorName, name);
    encoder_.String(kDescriptorDescription, description);
    if (counter) {
      size_t c = encoder_.BeginNested(kDescriptorCounter);
      encoder_.Varint(kCounterUnit, kUnitSizeBytes);
      encoder_.EndNested(c);
    }
    encoder_.EndNested(d);
    encoder_.EndNested(packet);
  };
  track(MemoryCounterUuid(pid), kMemoryCounterName,
        "Bytes allocated by c10::alloc_cpu while tracing and not freed yet "
        "(memory allocated before the trace is not counted).",
        true);
  track(MemoryOutsideOpsUuid(pid), kMemoryOutsideOpsName,
        "CPU allocations and frees made while no op was running on their thread.", false);
}

void PerfettoWriter::AddMemoryEvent(const MemoryEvent& e) {
  DescribeMemoryTracks(e.pid);
  auto begin_packet = [this, &e] {
    size_t packet = encoder_.BeginNested(kPacket);
    encoder_.Varint(kPacketTimestamp, e.ts_ns);
    encoder_.Varint(kPacketClockId, kMonotonic);
    encoder_.Varint(kPacketSequenceId, kGlobalSequenceId);
    return packet;
  };
  size_t packet = begin_packet();
  size_t event = encoder_.BeginNested(kPacketTrackEvent);
  encoder_.Varint(kEventKind, kKindCounter);
  encoder_.Varint(kEventTrack, MemoryCounterUuid(e.pid));
  encoder_.Varint(kEventCounterValue, e.allocated);
  encoder_.EndNested(event);
  encoder_.EndNested(packet);

  packet = begin_packet();
  event = encoder_.BeginNested(kPacketTrackEvent);
  encoder_.Varint(kEventKind, kKindInstant);
  encoder_.Varint(kEventTrack, e.op_id == kNoOp ? MemoryOutsideOpsUuid(e.pid) : ThreadUuid(e.pid, e.tid));
  encoder_.String(kEventCategory, "memory");
  encoder_.String(kEventNameString, e.kind == MemoryEvent::kAlloc ? "alloc" : "free");
  auto arg = [this](const char* name, uint32_t field, uint64_t value) {
    size_t a = encoder_.BeginNested(kEventAnnotations);
    encoder_.String(kArgName, name);
    encoder_.Varint(field, value);
    encoder_.EndNested(a);
  };
  auto text = [this](const char* name, std::string_view value) {
    size_t a = encoder_.BeginNested(kEventAnnotations);
    encoder_.String(kArgName, name);
    encoder_.String(kArgString, value);
    encoder_.EndNested(a);
  };
  arg("bytes", kArgUint, e.bytes);
  arg("address", kArgPointer, e.address);
  arg("id", kArgUint, e.id);
  arg("allocated", kArgUint, e.allocated);
  arg("pid", kArgUint, e.pid);
  arg("tid", kArgUint, e.tid);
  if (e.op_id != kNoOp) text("op", Op(e.op_id).name);
  if (e.kind == MemoryEvent::kFree && e.alloc_op_id != kNoOp) text("alloc_op", Op(e.alloc_op_id).name);
  if (e.kind == MemoryEvent::kFree) arg("alloc_ts", kArgUint, e.alloc_ts_ns);
  if (e.kind == MemoryEvent::kPreexistingFree) arg("preexisting", kArgBool, 1);
  encoder_.EndNested(event);
  encoder_.EndNested(packet);
  max_ts_ = std::max(max_ts_, e.ts_ns);
  MaybeFlush();
}

}  // namespace torchprobe
