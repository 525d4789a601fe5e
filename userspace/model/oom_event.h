// What an EV_OOM event says, in words: whether it is running out of memory
// (alloc_cpu's failed check, a device allocator's report) or another failed
// c10 check, and where. Read by the oom probe set and the flight recorder.
#ifndef TORCHPROBE_MODEL_OOM_EVENT_H
#define TORCHPROBE_MODEL_OOM_EVENT_H

#include <cinttypes>
#include <cstdio>
#include <string>
#include <string_view>

#include "bpf/events.h"

namespace torchprobe {

// alloc_cpu's CAFFE_ENFORCE is the CPU allocator running out of memory.
inline constexpr std::string_view kCpuAllocatorSource = "alloc_cpu.cpp";

struct OomFacts {
  bool out_of_memory = false;  // false: another failed check (not counted)
  std::string where;           // "alloc_cpu.cpp:75 (CPU)", "a device allocator, 2147483648 bytes asked"
};

inline OomFacts DescribeOom(const tp_oom_event& event) {
  OomFacts facts;
  if (event.kind == TP_OOM_DEVICE) {
    facts.out_of_memory = true;
    char text[96];
    std::snprintf(text, sizeof text, "a device allocator, %" PRId64 " bytes asked", static_cast<int64_t>(event.bytes));
    facts.where = text;
    return facts;
  }
  if (event.kind != TP_OOM_ENFORCE) return facts;
  std::string_view file(event.file, event.file_len < TP_OOM_FILE_LEN ? event.file_len : TP_OOM_FILE_LEN);
  std::string_view base = file.substr(file.rfind('/') == std::string_view::npos ? 0 : file.rfind('/') + 1);
  facts.out_of_memory = base == kCpuAllocatorSource;
  facts.where = std::string(base) + ":" + std::to_string(event.line) + (facts.out_of_memory ? " (CPU)" : "");
  return facts;
}

}  // namespace torchprobe

#endif  // TORCHPROBE_MODEL_OOM_EVENT_H
