// PerfettoWriter's helpers for tracks on the global sequence (GPU streams,
// thread states); see perfetto_writer.h. Their slices carry explicit
// MONOTONIC timestamps: they come from their own sources, in their own order.
#include <algorithm>
#include <string>

#include "userspace/export/perfetto_fields.h"
#include "userspace/export/perfetto_writer.h"

namespace torchprobe {
namespace {

using namespace perfetto_fields;  // NOLINT: the generated field names

}  // namespace

void PerfettoWriter::DescribeGlobalTrack(bool& described, uint64_t uuid, uint64_t parent, const std::string& name,
                                   int32_t sibling_rank) {
  if (described) return;
  described = true;
  size_t packet = encoder_.BeginNested(kPacket);
  encoder_.Varint(Packet::kTrustedPacketSequenceIdFieldNumber, kGlobalSequenceId);
  size_t d = encoder_.BeginNested(Packet::kTrackDescriptorFieldNumber);
  encoder_.Varint(Descriptor::kUuidFieldNumber, uuid);
  if (parent) encoder_.Varint(Descriptor::kParentUuidFieldNumber, parent);
  encoder_.String(Descriptor::kNameFieldNumber, name);
  if (sibling_rank >= 0) {
    encoder_.Varint(Descriptor::kSiblingOrderRankFieldNumber, static_cast<uint64_t>(sibling_rank));
    encoder_.Varint(Descriptor::kSiblingMergeBehaviorFieldNumber, Descriptor::SIBLING_MERGE_BEHAVIOR_NONE);
  } else if (!parent) {
    encoder_.Varint(Descriptor::kChildOrderingFieldNumber, Descriptor::EXPLICIT);
  }
  encoder_.EndNested(d);
  encoder_.EndNested(packet);
}

size_t PerfettoWriter::BeginGlobalPacket(uint64_t ts_ns) {
  size_t packet = encoder_.BeginNested(kPacket);
  encoder_.Varint(Packet::kTimestampFieldNumber, ts_ns);
  encoder_.Varint(Packet::kTimestampClockIdFieldNumber, pb::BUILTIN_CLOCK_MONOTONIC);
  encoder_.Varint(Packet::kTrustedPacketSequenceIdFieldNumber, kGlobalSequenceId);
  return packet;
}

void PerfettoWriter::NumberArg(const char* name, uint64_t value) {
  size_t arg = encoder_.BeginNested(Event::kDebugAnnotationsFieldNumber);
  encoder_.String(Arg::kNameFieldNumber, name);
  encoder_.Varint(Arg::kUintValueFieldNumber, value);
  encoder_.EndNested(arg);
}

void PerfettoWriter::TextArg(const char* name, const std::string& value) {
  size_t arg = encoder_.BeginNested(Event::kDebugAnnotationsFieldNumber);
  encoder_.String(Arg::kNameFieldNumber, name);
  encoder_.String(Arg::kStringValueFieldNumber, value);
  encoder_.EndNested(arg);
}

void PerfettoWriter::EndGlobalSlice(uint64_t track, uint64_t ts_ns) {
  size_t packet = BeginGlobalPacket(ts_ns);
  size_t event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
  encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_SLICE_END);
  encoder_.Varint(Event::kTrackUuidFieldNumber, track);
  encoder_.EndNested(event);
  encoder_.EndNested(packet);
  max_ts_ = std::max(max_ts_, ts_ns);
}

}  // namespace torchprobe
