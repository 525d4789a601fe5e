// ChromeTraceWriter's memory events, as Kineto writes them with
// profile_memory=True: an instant `[memory]` (cat cpu_instant_event, scope
// thread) on the allocating or freeing thread, args Addr, Bytes (negative
// for a free), Total Allocated and Total Reserved (the memory model's
// counter; a device's: its caching allocator's totals), Device Type
// (c10::DeviceType) and Device Id (-1 for the CPU). The caching
// allocator's segments (cudaMalloc) are not Kineto's and are left out.
#include "userspace/export/chrome_trace_writer.h"

namespace torchprobe {

void ChromeTraceWriter::AddMemoryEvent(const MemoryEvent& e) {
  if (e.segment) return;
  int64_t bytes = static_cast<int64_t>(e.bytes);
  StartEvent();
  text_.Raw("{").Key("ph").String("i").Raw(", ").Key("cat").String("cpu_instant_event").Raw(", ");
  text_.Key("s").String("t").Raw(", ").Key("name").String("[memory]").Raw(", ");
  text_.Key("pid").UInt(e.pid).Raw(", ").Key("tid").UInt(e.tid).Raw(", ").Key("ts").Micros(e.ts_ns).Raw(", ");
  text_.Key("args").Raw("{").Key("Total Reserved").UInt(e.reserved).Raw(", ");
  text_.Key("Total Allocated").UInt(e.allocated).Raw(", ");
  text_.Key("Bytes").Int(e.kind == MemoryEvent::kAlloc ? bytes : -bytes).Raw(", ");
  text_.Key("Addr").UInt(e.address).Raw(", ").Key("Device Type").UInt(e.device_type).Raw(", ");
  text_.Key("Device Id").Int(e.device_type == 0 ? -1 : e.device_index).Raw("}}");
  out_.MaybeFlush();
}

}  // namespace torchprobe
