// PerfettoWriter's GPU tracks; see perfetto_writer.h. Written on the global
// sequence with explicit MONOTONIC timestamps, after every CPU slice (the
// join holds activities until the end), one stream's activities in start
// order without overlap, so they nest on their track.
#include <string>

#include "userspace/export/perfetto_fields.h"
#include "userspace/export/perfetto_writer.h"

namespace torchprobe {
namespace {

using namespace perfetto_fields;  // NOLINT: the generated field names

}  // namespace

void PerfettoWriter::AddGpuActivity(const GpuActivity& a) {
  uint64_t gpu = GpuUuid(a.device), stream = StreamUuid(a.pid, a.device, a.stream);
  DescribeGlobalTrack(gpu_tracks_[gpu], gpu, 0, "GPU " + std::to_string(a.device));
  DescribeGlobalTrack(gpu_tracks_[stream], stream, gpu, "Stream " + std::to_string(a.stream) + " (pid " + std::to_string(a.pid) + ")",
                static_cast<int32_t>(a.stream));
  auto dims = [](const int32_t d[3]) {
    return "[" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + "]";
  };

  size_t packet = BeginGlobalPacket(a.start_ns);
  size_t event = encoder_.BeginNested(Packet::kTrackEventFieldNumber);
  encoder_.Varint(Event::kTypeFieldNumber, Event::TYPE_SLICE_BEGIN);
  encoder_.Varint(Event::kTrackUuidFieldNumber, stream);
  encoder_.String(Event::kCategoriesFieldNumber, KinetoCategory(a.kind));
  encoder_.String(Event::kNameFieldNumber, CleanUtf8(a.name));
  NumberArg("device", a.device);
  NumberArg("context", a.context);
  NumberArg("stream", a.stream);
  NumberArg("cupti_correlation", a.cupti_correlation);
  if (a.correlation) {
    NumberArg(kCorrelationArg, a.correlation);
    NumberArg("launch_tid", a.launch_tid);
    TextArg("launch", a.launch_call);
    if (!a.op.empty()) TextArg("op", CleanUtf8(a.op));
  }
  if (a.kind == GpuActivity::kKernel) {
    TextArg("grid", dims(a.grid));
    TextArg("block", dims(a.block));
    NumberArg("shared memory", a.shared_bytes);
    NumberArg("registers per thread", a.registers);
  } else {
    NumberArg("bytes", a.bytes);
  }
  if (a.graph_id) NumberArg("graph", a.graph_id);
  if (a.clamped) NumberArg("clamped", 1);
  if (a.correlation && a.first_of_launch)
    encoder_.Fixed64(Event::kTerminatingFlowIdsFieldNumber, FlowId(a.correlation));
  encoder_.EndNested(event);
  encoder_.EndNested(packet);
  EndGlobalSlice(stream, a.end_ns);
  MaybeFlush();
}

}  // namespace torchprobe
