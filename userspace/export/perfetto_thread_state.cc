// PerfettoWriter's thread-state tracks (--sched); see perfetto_writer.h.
// Written on the global sequence with explicit MONOTONIC timestamps, as
// they come: one thread's times off the CPU come in time order and never
// overlap, so its track's slices do not nest.
#include <algorithm>
#include <string>

#include "userspace/export/perfetto_fields.h"
#include "userspace/export/perfetto_writer.h"

namespace torchprobe {
namespace {

using namespace perfetto_fields;  // NOLINT: the generated field names

}  // namespace

void PerfettoWriter::AddOffCpu(const OffCpu& off) {
  uint64_t uuid = ThreadStateUuid(off.pid, off.tid);
  bool& described = state_tracks_[uuid];
  if (!described) {
    described = true;
    size_t packet = encoder_.BeginNested(kPacket);
    encoder_.Varint(Packet::kTrustedPacketSequenceIdFieldNumber, kGlobalSequenceId);
    size_t d = encoder_.BeginNested(Packet::kTrackDescriptorFieldNumber);
    encoder_.Varint(Descriptor::kUuidFieldNumber, uuid);
    encoder_.Varint(Descriptor::kParentUuidFieldNumber, ThreadUuid(off.pid, off.tid));
    encoder_.String(Descriptor::kNameFieldNumber, "Thread state " + std::to_string(off.tid));
    encoder_.EndNested(d);
    encoder_.EndNested(packet);
  }
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
  for (const ThreadStateSpan& span : SpansOf(off)) {
    size_t packet = begin_packet(span.begin_ns);
    size_t event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
    encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_SLICE_BEGIN);
    encoder_.Varint(Event::kTrackUuidFieldNumber, uuid);
    encoder_.String(Event::kCategoriesFieldNumber, kThreadStateCategory);
    encoder_.String(Event::kNameFieldNumber, span.name);
    number("pid", off.pid);
    number("tid", off.tid);
    encoder_.EndNested(event);
    encoder_.EndNested(packet);
    packet = begin_packet(span.end_ns);
    event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
    encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_SLICE_END);
    encoder_.Varint(Event::kTrackUuidFieldNumber, uuid);
    encoder_.EndNested(event);
    encoder_.EndNested(packet);
    max_ts_ = std::max(max_ts_, span.end_ns);
  }
  MaybeFlush();
}

}  // namespace torchprobe
