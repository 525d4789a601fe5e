// Field numbers from our .proto subset's generated code (upstream's
// numbers), under short names, for the PerfettoWriter parts that encode by
// hand (perfetto_memory.cc, perfetto_gpu.cc).
#ifndef TORCHPROBE_EXPORT_PERFETTO_FIELDS_H
#define TORCHPROBE_EXPORT_PERFETTO_FIELDS_H

#include <cstdint>

#include "schemas/perfetto_trace.pb.h"

namespace torchprobe::perfetto_fields {

namespace pb = ::torchprobe::pftrace;
using Packet = pb::TracePacket;
using Descriptor = pb::TrackDescriptor;
using Event = pb::TrackEvent;
using Arg = pb::DebugAnnotation;
constexpr uint32_t kPacket = pb::Trace::kPacketFieldNumber;

}  // namespace torchprobe::perfetto_fields

#endif  // TORCHPROBE_EXPORT_PERFETTO_FIELDS_H
