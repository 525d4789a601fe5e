// PerfettoWriter's memory tracks (--memory); see perfetto_writer.h. Written
// on the global sequence with explicit MONOTONIC timestamps: they arrive as
// the probes fire, while op slices arrive a finished tree at a time, and
// trace_processor sorts the two.
#include <algorithm>
#include <map>
#include <string>

#include "userspace/export/perfetto_fields.h"
#include "userspace/export/perfetto_writer.h"

namespace torchprobe {
namespace {

using namespace perfetto_fields;  // NOLINT: the generated field names

void DescribeTrack(ProtoEncoder& encoder, uint64_t uuid, uint64_t parent, const std::string& name,
                   const char* description, bool counter) {
  size_t packet = encoder.BeginNested(kPacket);
  encoder.Varint(Packet::kTrustedPacketSequenceIdFieldNumber, PerfettoWriter::kGlobalSequenceId);
  size_t d = encoder.BeginNested(Packet::kTrackDescriptorFieldNumber);
  encoder.Varint(Descriptor::kUuidFieldNumber, uuid);
  encoder.Varint(Descriptor::kParentUuidFieldNumber, parent);
  encoder.String(Descriptor::kNameFieldNumber, name);
  encoder.String(Descriptor::kDescriptionFieldNumber, description);
  if (counter) {
    size_t c = encoder.BeginNested(Descriptor::kCounterFieldNumber);
    encoder.Varint(pb::CounterDescriptor::kUnitFieldNumber, pb::CounterDescriptor::UNIT_SIZE_BYTES);
    encoder.EndNested(c);
  }
  encoder.EndNested(d);
  encoder.EndNested(packet);
}

// "cuda:0": c10::DeviceType 1 is CUDA; the others by number.
std::string DeviceName(uint8_t type, int8_t index) {
  std::string name = type == 1 ? "cuda" : "device" + std::to_string(type);
  return name + ":" + std::to_string(index);
}

}  // namespace

void PerfettoWriter::DescribeDeviceTracks(uint32_t pid, uint16_t device, const std::string& name) {
  bool& described = device_tracks_[(uint64_t{pid} << 16) | device];
  if (described) return;
  described = true;
  DescribeTrack(encoder_, DeviceAllocatedUuid(pid, device), ProcessUuid(pid), name + " memory allocated",
                "Bytes the device's caching allocator has handed out (its own total).", true);
  DescribeTrack(encoder_, DeviceReservedUuid(pid, device), ProcessUuid(pid), name + " memory reserved",
                "Bytes the device's caching allocator holds from the driver, in use or cached.", true);
}

void PerfettoWriter::WriteCounter(uint64_t ts_ns, uint64_t uuid, uint64_t value) {
  size_t packet = encoder_.BeginNested(kPacket);
  encoder_.Varint(Packet::kTimestampFieldNumber, ts_ns);
  encoder_.Varint(Packet::kTimestampClockIdFieldNumber, pb::BUILTIN_CLOCK_MONOTONIC);
  encoder_.Varint(Packet::kTrustedPacketSequenceIdFieldNumber, kGlobalSequenceId);
  size_t event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
  encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_COUNTER);
  encoder_.Varint(Event::kTrackUuidFieldNumber, uuid);
  encoder_.Varint(Event::kCounterValueFieldNumber, value);
  encoder_.EndNested(event);
  encoder_.EndNested(packet);
}

void PerfettoWriter::DescribeMemoryTracks(uint32_t pid) {
  if (memory_tracks_[pid]) return;
  memory_tracks_[pid] = true;
  auto track = [this, pid](uint64_t uuid, const std::string& name, const char* description, bool counter) {
    DescribeTrack(encoder_, uuid, ProcessUuid(pid), name, description, counter);
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
  std::string device;
  const char* name = e.kind == MemoryEvent::kAlloc ? "alloc" : "free";
  if (e.segment) {
    if (!segment_tracks_[e.pid]) {
      segment_tracks_[e.pid] = true;
      DescribeTrack(encoder_, SegmentsUuid(e.pid), ProcessUuid(e.pid), "cudaMalloc bytes",
                    "Device memory taken from the CUDA runtime (cudaMalloc) while tracing and not "
                    "given back (cudaFree), all devices.",
                    true);
    }
    WriteCounter(e.ts_ns, SegmentsUuid(e.pid), e.allocated);
    name = e.kind == MemoryEvent::kAlloc ? "cudaMalloc" : "cudaFree";
  } else if (e.device_type == 0) {
    WriteCounter(e.ts_ns, MemoryCounterUuid(e.pid), e.allocated);
  } else {
    uint16_t key = static_cast<uint16_t>((e.device_type << 8) | static_cast<uint8_t>(e.device_index));
    device = DeviceName(e.device_type, e.device_index);
    DescribeDeviceTracks(e.pid, key, device);
    WriteCounter(e.ts_ns, DeviceAllocatedUuid(e.pid, key), e.allocated);
    WriteCounter(e.ts_ns, DeviceReservedUuid(e.pid, key), e.reserved);
  }
  size_t packet = encoder_.BeginNested(kPacket);
  encoder_.Varint(Packet::kTimestampFieldNumber, e.ts_ns);
  encoder_.Varint(Packet::kTimestampClockIdFieldNumber, pb::BUILTIN_CLOCK_MONOTONIC);
  encoder_.Varint(Packet::kTrustedPacketSequenceIdFieldNumber, kGlobalSequenceId);
  size_t event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
  encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_INSTANT);  encoder_.Varint(Event::kTrackUuidFieldNumber, e.op_id == kNoOp ? MemoryOutsideOpsUuid(e.pid) : ThreadUuid(e.pid, e.tid));
  encoder_.String(Event::kCategoriesFieldNumber, "memory");
  encoder_.String(Event::kNameFieldNumber, name);
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
  if (e.python) text(kMemoryPythonArg, CleanUtf8(InnermostLine(e.python.get())));
  if (e.kind == MemoryEvent::kFree && e.alloc_op_id != kNoOp) text("alloc_op", Op(e.alloc_op_id).name);
  if (e.kind == MemoryEvent::kFree) arg("alloc_ts", Arg::kUintValueFieldNumber, e.alloc_ts_ns);
  if (e.kind == MemoryEvent::kPreexistingFree) arg("preexisting", Arg::kBoolValueFieldNumber, 1);
  if (!device.empty()) {
    text("device", device);
    arg("reserved", Arg::kUintValueFieldNumber, e.reserved);
  }
  encoder_.EndNested(event);
  encoder_.EndNested(packet);
  max_ts_ = std::max(max_ts_, e.ts_ns);
  MaybeFlush();
}

void PerfettoWriter::AddMemoryCategories(const MemoryCategoryResult& result) {
  std::map<uint64_t, bool> described;
  for (const MemoryCategoryResult::Change& change : result.changes) {
    int category = static_cast<int>(change.category);
    uint64_t uuid = MemoryCategoryUuid(change.pid, change.device, category);
    if (!described[uuid]) {
      described[uuid] = true;
      DescribeTrack(encoder_, uuid, ProcessUuid(change.pid), MemoryCategoryTrackName(change.device, change.category),
                    "Bytes allocated while tracing, by what they hold (torch.profiler's memory categories), "
                    "inferred from the ops' Tensor arguments at the end of the trace.",
                    true);
    }
    WriteCounter(change.ts_ns, uuid, change.bytes);
  }
}

}  // namespace torchprobe
