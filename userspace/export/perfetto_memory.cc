// PerfettoWriter's memory tracks (--memory); see perfetto_writer.h. Written
// on the global sequence with explicit MONOTONIC timestamps: they arrive as
// the probes fire, while op slices arrive a finished tree at a time, and
// trace_processor sorts the two.
#include <algorithm>

#include "schemas/perfetto_trace.pb.h"
#include "userspace/export/perfetto_writer.h"

namespace torchprobe {
namespace {

// Field numbers from our .proto subset's generated code (upstream's numbers).
namespace pb = ::torchprobe::pftrace;
using Packet = pb::TracePacket;
using Descriptor = pb::TrackDescriptor;
using Event = pb::TrackEvent;
using Arg = pb::DebugAnnotation;
constexpr uint32_t kPacket = pb::Trace::kPacketFieldNumber;

}  // namespace

void PerfettoWriter::DescribeMemoryTracks(uint32_t pid) {
  if (memory_tracks_[pid]) return;
  memory_tracks_[pid] = true;
  auto track = [this, pid](uint64_t uuid, const char* name, const char* description, bool counter) {
    size_t packet = encoder_.BeginNested(kPacket);
    encoder_.Varint(Packet::kTrustedPacketSequenceIdFieldNumber, kGlobalSequenceId);
    size_t d = encoder_.BeginNested(Packet::kTrackDescriptorFieldNumber);
    encoder_.Varint(Descriptor::kUuidFieldNumber, uuid);
    encoder_.Varint(Descriptor::kParentUuidFieldNumber, ProcessUuid(pid));
    encoder_.String(Descriptor::kNameFieldNumber, name);
    encoder_.String(Descriptor::kDescriptionFieldNumber, description);
    if (counter) {
      size_t c = encoder_.BeginNested(Descriptor::kCounterFieldNumber);
      encoder_.Varint(pb::CounterDescriptor::kUnitFieldNumber, pb::CounterDescriptor::UNIT_SIZE_BYTES);
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
    encoder_.Varint(Packet::kTimestampFieldNumber, e.ts_ns);
    encoder_.Varint(Packet::kTimestampClockIdFieldNumber, pb::BUILTIN_CLOCK_MONOTONIC);
    encoder_.Varint(Packet::kTrustedPacketSequenceIdFieldNumber, kGlobalSequenceId);
    return packet;
  };
  size_t packet = begin_packet();
  size_t event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
  encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_COUNTER);
  encoder_.Varint(Event::kTrackUuidFieldNumber, MemoryCounterUuid(e.pid));
  encoder_.Varint(Event::kCounterValueFieldNumber, e.allocated);
  encoder_.EndNested(event);
  encoder_.EndNested(packet);

  packet = begin_packet();
  event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
  encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_INSTANT);
  encoder_.Varint(Event::kTrackUuidFieldNumber, e.op_id == kNoOp ? MemoryOutsideOpsUuid(e.pid) : ThreadUuid(e.pid, e.tid));
  encoder_.String(Event::kCategoriesFieldNumber, "memory");
  encoder_.String(Event::kNameFieldNumber, e.kind == MemoryEvent::kAlloc ? "alloc" : "free");
  auto arg = [this](const char* name, uint32_t field, uint64_t value) {
    size_t a = encoder_.BeginNested(Event::kDebugAnnotationsFieldNumber);
    encoder_.String(Arg::kNameFieldNumber, name);
    encoder_.Varint(field, value);
    encoder_.EndNested(a);
  };
  auto text = [this](const char* name, std::string_view value) {
    size_t a = encoder_.BeginNested(Event::kDebugAnnotationsFieldNumber);
    encoder_.String(Arg::kNameFieldNumber, name);
    encoder_.String(Arg::kStringValueFieldNumber, value);
    encoder_.EndNested(a);
  };
  arg("bytes", Arg::kUintValueFieldNumber, e.bytes);
  arg("address", Arg::kPointerValueFieldNumber, e.address);
  arg("id", Arg::kUintValueFieldNumber, e.id);
  arg("allocated", Arg::kUintValueFieldNumber, e.allocated);
  arg("pid", Arg::kUintValueFieldNumber, e.pid);
  arg("tid", Arg::kUintValueFieldNumber, e.tid);
  if (e.op_id != kNoOp) text("op", Op(e.op_id).name);
  if (e.kind == MemoryEvent::kFree && e.alloc_op_id != kNoOp) text("alloc_op", Op(e.alloc_op_id).name);
  if (e.kind == MemoryEvent::kFree) arg("alloc_ts", Arg::kUintValueFieldNumber, e.alloc_ts_ns);
  if (e.kind == MemoryEvent::kPreexistingFree) arg("preexisting", Arg::kBoolValueFieldNumber, 1);
  encoder_.EndNested(event);
  encoder_.EndNested(packet);
  max_ts_ = std::max(max_ts_, e.ts_ns);
  MaybeFlush();
}

}  // namespace torchprobe
