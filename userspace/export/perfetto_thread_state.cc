// PerfettoWriter's thread-state tracks (--sched); see perfetto_writer.h.
// On the global sequence, as they come: one thread's times off the CPU come
// in time order and never overlap, so its track's slices do not nest.
#include <string>

#include "userspace/export/perfetto_fields.h"
#include "userspace/export/perfetto_writer.h"

namespace torchprobe {
namespace {

using namespace perfetto_fields;  // NOLINT: the generated field names

}  // namespace

void PerfettoWriter::AddOffCpu(const OffCpu& off) {
  uint64_t uuid = ThreadStateUuid(off.pid, off.tid);
  DescribeGlobalTrack(state_tracks_[uuid], uuid, ThreadUuid(off.pid, off.tid), "Thread state " + std::to_string(off.tid));
  for (const ThreadStateSpan& span : SpansOf(off)) {
    size_t packet = BeginGlobalPacket(span.begin_ns);
    size_t event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
    encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_SLICE_BEGIN);
    encoder_.Varint(Event::kTrackUuidFieldNumber, uuid);
    encoder_.String(Event::kCategoriesFieldNumber, kThreadStateCategory);
    encoder_.String(Event::kNameFieldNumber, span.name);
    NumberArg("pid", off.pid);
    NumberArg("tid", off.tid);
    encoder_.EndNested(event);
    encoder_.EndNested(packet);
    EndGlobalSlice(uuid, span.end_ns);
  }
  MaybeFlush();
}

}  // namespace torchprobe
