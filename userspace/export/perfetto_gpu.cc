// PerfettoWriter's GPU tracks; see perfetto_writer.h. Written on the global
// sequence with explicit MONOTONIC timestamps, after every CPU slice (the
// join holds activities until the end), one stream's activities in start
// order without overlap, so they nest on their track.
#include <algorithm>
#include <string>

#include "userspace/export/perfetto_fields.h"
#include "userspace/export/perfetto_writer.h"

namespace torchprobe {
namespace {

using namespace perfetto_fields;  // NOLINT: the generated field names

}  // namespace

void PerfettoWriter::AddGpuActivity(const GpuActivity& a) {
  uint64_t gpu = GpuUuid(a.device), stream = StreamUuid(a.pid, a.device, a.stream);
  auto describe = [this](uint64_t uuid, uint64_t parent, const std::string& name, int32_t rank) {
    bool& described = gpu_tracks_[uuid];
    if (described) return;
    described = true;
    size_t packet = encoder_.BeginNested(kPacket);
    encoder_.Varint(Packet::kTrustedPacketSequenceIdFieldNumber, kGlobalSequenceId);
    size_t d = encoder_.BeginNested(Packet::kTrackDescriptorFieldNumber);
    encoder_.Varint(Descriptor::kUuidFieldNumber, uuid);
    if (parent) encoder_.Varint(Descriptor::kParentUuidFieldNumber, parent);
    encoder_.String(Descriptor::kNameFieldNumber, name);
    if (parent) {
      encoder_.Varint(Descriptor::kSiblingOrderRankFieldNumber, static_cast<uint64_t>(rank));
      encoder_.Varint(Descriptor::kSiblingMergeBehaviorFieldNumber, Descriptor::SIBLING_MERGE_BEHAVIOR_NONE);
    } else {
      encoder_.Varint(Descriptor::kChildOrderingFieldNumber, Descriptor::EXPLICIT);
    }
    encoder_.EndNested(d);
    encoder_.EndNested(packet);
  };
  describe(gpu, 0, "GPU " + std::to_string(a.device), 0);
  describe(stream, gpu, "Stream " + std::to_string(a.stream) + " (pid " + std::to_string(a.pid) + ")",
           static_cast<int32_t>(a.stream));

  auto begin_packet = [this](uint64_t ts) {
    size_t packet = encoder_.BeginNested(kPacket);
    encoder_.Varint(Packet::kTimestampFieldNumber, ts);
    encoder_.Varint(Packet::kTimestampClockIdFieldNumber, pb::BUILTIN_CLOCK_MONOTONIC);
    encoder_.Varint(Packet::kTrustedPacketSequenceIdFieldNumber, kGlobalSequenceId);
    return packet;
  };
  auto number = [this](const char* name, uint64_t value) {
    size_t arg = encoder_.BeginNested(Event::kDebugAnnotationsFieldNumber);
    encoder_.String(Arg::kNameFieldNumber, name);
    encoder_.Varint(Arg::kUintValueFieldNumber, value);
    encoder_.EndNested(arg);
  };
  auto text = [this](const char* name, const std::string& value) {
    size_t arg = encoder_.BeginNested(Event::kDebugAnnotationsFieldNumber);
    encoder_.String(Arg::kNameFieldNumber, name);
    encoder_.String(Arg::kStringValueFieldNumber, value);
    encoder_.EndNested(arg);
  };
  auto dims = [](const int32_t d[3]) {
    return "[" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + "]";
  };

  size_t packet = begin_packet(a.start_ns);
  size_t event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
  encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_SLICE_BEGIN);
  encoder_.Varint(Event::kTrackUuidFieldNumber, stream);
  encoder_.String(Event::kCategoriesFieldNumber, KinetoCategory(a.kind));
  encoder_.String(Event::kNameFieldNumber, CleanUtf8(a.name));
  number("device", a.device);
  number("context", a.context);
  number("stream", a.stream);
  number("cupti_correlation", a.cupti_correlation);
  if (a.correlation) {
    number(kCorrelationArg, a.correlation);
    number("launch_tid", a.launch_tid);
    text("launch", a.launch_call);
    if (!a.op.empty()) text("op", CleanUtf8(a.op));
  }
  if (a.kind == GpuActivity::kKernel) {
    text("grid", dims(a.grid));
    text("block", dims(a.block));
    number("shared memory", a.shared_bytes);
    number("registers per thread", a.registers);
  } else {
    number("bytes", a.bytes);
  }
  if (a.graph_id) number("graph", a.graph_id);
  if (a.clamped) number("clamped", 1);
  if (a.correlation && a.first_of_launch)
    encoder_.Fixed64(Event::kTerminatingFlowIdsFieldNumber, FlowId(a.correlation));
  encoder_.EndNested(event);
  encoder_.EndNested(packet);

  packet = begin_packet(a.end_ns);
  event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
  encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_SLICE_END);
  encoder_.Varint(Event::kTrackUuidFieldNumber, stream);
  encoder_.EndNested(event);
  encoder_.EndNested(packet);
  max_ts_ = std::max(max_ts_, a.end_ns);
  MaybeFlush();
}

}  // namespace torchprobe
