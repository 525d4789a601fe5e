// ChromeTraceWriter's GPU events, as Kineto writes them (FORMATS.md section
// 3): an `X` event per kernel, copy and fill on pid = device, tid = stream,
// with `correlation` equal to its launching `cuda_runtime`/`cuda_driver`
// event's, and the `ac2g` flow's end on it (bp "e": bound to that event).
#include <algorithm>
#include <string>

#include "userspace/export/chrome_trace_writer.h"

namespace torchprobe {
void ChromeTraceWriter::AddGpuActivity(const GpuActivity& a) {
  auto name_event = [this](const char* what, uint32_t pid, uint32_t tid, const std::string& name) {
    StartEvent();
    text_.Raw("{").Key("name").String(what).Raw(", ").Key("ph").String("M").Raw(", ");
    text_.Key("ts").Micros(first_ts_ns_).Raw(", ").Key("pid").UInt(pid).Raw(", ").Key("tid").UInt(tid);
    text_.Raw(", ").Key("args").Raw("{").Key("name").String(name).Raw("}}");
  };
  uint64_t stream_key = (uint64_t{a.device} << 32) | a.stream | (1ull << 63);
  if (std::find(gpu_named_.begin(), gpu_named_.end(), a.device) == gpu_named_.end()) {
    gpu_named_.push_back(a.device);
    name_event("process_name", a.device, 0, "GPU " + std::to_string(a.device));
  }
  if (std::find(gpu_named_.begin(), gpu_named_.end(), stream_key) == gpu_named_.end()) {
    gpu_named_.push_back(stream_key);
    name_event("thread_name", a.device, a.stream, "stream " + std::to_string(a.stream));
  }
  auto dims = [this](const int32_t d[3]) {
    text_.Raw("[").Int(d[0]).Raw(", ").Int(d[1]).Raw(", ").Int(d[2]).Raw("]");
  };
  StartEvent();
  text_.Raw("{").Key("ph").String("X").Raw(", ").Key("cat").String(KinetoCategory(a.kind)).Raw(", ");
  text_.Key("name").String(a.name).Raw(", ").Key("pid").UInt(a.device).Raw(", ");
  text_.Key("tid").UInt(a.stream).Raw(", ").Key("ts").Micros(a.start_ns).Raw(", ");
  text_.Key("dur").Micros(a.end_ns - a.start_ns).Raw(", ").Key("args").Raw("{");
  auto external = launch_external_ids_.find(a.correlation);
  if (a.correlation && external != launch_external_ids_.end())
    text_.Key("External id").UInt(external->second).Raw(", ");
  text_.Key("device").UInt(a.device).Raw(", ").Key("context").UInt(a.context).Raw(", ");
  text_.Key("stream").UInt(a.stream).Raw(", ").Key("correlation").UInt(a.correlation);
  if (a.kind == GpuActivity::kKernel) {
    text_.Raw(", ").Key("registers per thread").UInt(a.registers);
    text_.Raw(", ").Key("shared memory").UInt(a.shared_bytes);
    text_.Raw(", ").Key("grid");
    dims(a.grid);
    text_.Raw(", ").Key("block");
    dims(a.block);
  } else {
    text_.Raw(", ").Key("bytes").UInt(a.bytes);
  }
  if (!a.op.empty()) text_.Raw(", ").Key("op").String(a.op);
  text_.Raw("}}");
  if (a.correlation && a.first_of_launch) {
    StartEvent();
    text_.Raw("{").Key("ph").String("f").Raw(", ").Key("id").UInt(a.correlation).Raw(", ");
    text_.Key("pid").UInt(a.device).Raw(", ").Key("tid").UInt(a.stream).Raw(", ").Key("ts").Micros(a.start_ns);
    text_.Raw(", ").Key("cat").String("ac2g").Raw(", ").Key("name").String("launch").Raw(", ");
    text_.Key("bp").String("e").Raw("}");
  }
  out_.MaybeFlush();
}

}  // namespace torchprobe
