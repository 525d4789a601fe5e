// Golden CUPTI streams from text; see the header.
#include "tests/cupti_stream_text.h"

#include <cstring>
#include <map>
#include <sstream>

#include "userspace/cupti/record_stream.h"

namespace torchprobe::test {
namespace {

// key=value words after the kind and pid.
using Fields = std::map<std::string, std::string>;

uint64_t Num(const Fields& f, const char* key, uint64_t fallback = 0) {
  auto it = f.find(key);
  return it == f.end() ? fallback : std::stoull(it->second);
}

void Dims(const Fields& f, const char* key, int32_t out[3]) {
  auto it = f.find(key);
  out[0] = out[1] = out[2] = 1;
  if (it == f.end()) return;
  std::istringstream in(it->second);
  std::string part;
  for (int i = 0; i < 3 && std::getline(in, part, ','); ++i) out[i] = std::stoi(part);
}

template <typename T>
void Put(std::vector<uint8_t>* out, uint16_t type, uint32_t pid, T record, const std::string& tail = "") {
  record.hdr.type = type;
  record.hdr.size = static_cast<uint16_t>(sizeof(T) + tail.size());
  record.hdr.pid = pid;
  const auto* p = reinterpret_cast<const uint8_t*>(&record);
  out->insert(out->end(), p, p + sizeof(T));
  out->insert(out->end(), tail.begin(), tail.end());
}

tpc_activity Activity(const Fields& f) {
  tpc_activity a{};
  a.start_ns = Num(f, "start");
  a.end_ns = Num(f, "end");
  a.correlation = static_cast<uint32_t>(Num(f, "corr"));
  a.device = static_cast<uint32_t>(Num(f, "device"));
  a.context = static_cast<uint32_t>(Num(f, "context"));
  a.stream = static_cast<uint32_t>(Num(f, "stream"));
  a.graph_id = static_cast<uint32_t>(Num(f, "graph"));
  return a;
}

}  // namespace

bool ParseGoldenStream(const std::string& text, GoldenStream* out, std::string* error) {
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    std::istringstream words(line);
    std::string kind;
    if (!(words >> kind) || kind[0] == '#') continue;
    try {
      if (kind == "slice" || kind == "call") {
        CpuLine cpu;
        cpu.call = kind == "call";
        words >> cpu.pid >> cpu.tid >> cpu.begin_ns >> cpu.end_ns >> cpu.depth >> cpu.name;
        if (!words) throw std::invalid_argument("expected pid tid begin end depth name");
        out->cpu.push_back(cpu);
        continue;
      }
      uint32_t pid = 0;
      words >> pid;
      Fields f;
      std::string word;
      while (words >> word) {
        size_t eq = word.find('=');
        if (eq == std::string::npos) throw std::invalid_argument("expected key=value: " + word);
        f[word.substr(0, eq)] = word.substr(eq + 1);
      }
      if (kind == "hello") {
        tpc_hello r{};
        r.version = TPC_VERSION;
        r.clock = f["clock"] == "monotonic" ? TPC_CLOCK_MONOTONIC : TPC_CLOCK_CUPTI_OFFSET;
        r.clock_offset_ns = static_cast<int64_t>(Num(f, "offset"));
        Put(&out->records, TPC_HELLO, pid, r);
      } else if (kind == "api") {
        tpc_api r{};
        r.start_ns = Num(f, "start");
        r.end_ns = Num(f, "end");
        r.correlation = static_cast<uint32_t>(Num(f, "corr"));
        r.cbid = static_cast<uint32_t>(Num(f, "cbid"));
        r.domain = f["domain"] == "driver" ? TPC_API_DRIVER : TPC_API_RUNTIME;
        r.tid = static_cast<uint32_t>(Num(f, "tid"));
        Put(&out->records, TPC_API, pid, r);
      } else if (kind == "kernel") {
        tpc_kernel r{};
        r.a = Activity(f);
        Dims(f, "grid", r.grid);
        Dims(f, "block", r.block);
        r.name_len = static_cast<uint16_t>(f["name"].size());
        Put(&out->records, TPC_KERNEL, pid, r, f["name"]);
      } else if (kind == "memcpy") {
        tpc_memcpy r{};
        r.a = Activity(f);
        r.bytes = Num(f, "bytes");
        r.copy_kind = static_cast<uint8_t>(Num(f, "copy"));
        r.src_kind = static_cast<uint8_t>(Num(f, "src"));
        r.dst_kind = static_cast<uint8_t>(Num(f, "dst"));
        Put(&out->records, TPC_MEMCPY, pid, r);
      } else if (kind == "memset") {
        tpc_memset r{};
        r.a = Activity(f);
        r.bytes = Num(f, "bytes");
        Put(&out->records, TPC_MEMSET, pid, r);
      } else if (kind == "drops") {
        tpc_drops r{};
        r.records_sent = Num(f, "sent");
        r.records_dropped = Num(f, "dropped");
        r.cupti_dropped = Num(f, "cupti");
        Put(&out->records, TPC_DROPS, pid, r);
      } else {
        throw std::invalid_argument("unknown kind " + kind);
      }
    } catch (const std::exception& e) {
      *error = "line " + std::to_string(number) + ": " + e.what();
      return false;
    }
  }
  return true;
}

}  // namespace torchprobe::test
