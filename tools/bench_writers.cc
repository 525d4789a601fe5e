// `make bench` (tools/bench.py --part writers): export time, bytes per op
// slice and peak memory of each writer on a synthetic model of >= 1 M op
// slices (trees of 7 on 4 threads, 2000 ops with real-length schemas). Each
// format runs in its own child process so its peak RSS is its own; the RSS
// at a tenth of the slices is printed beside the peak to show the writers
// stream (flat), not hold the trace.
// Prints per format: writer F ns_per_slice N bytes_per_slice B rss_mib_at_10pct R peak_rss_mib P
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "userspace/base/clock.h"
#include "userspace/export/chrome_trace_writer.h"
#include "userspace/export/execution_trace_writer.h"
#include "userspace/export/perfetto_writer.h"

namespace torchprobe {
namespace {

// VmRSS or VmHWM of this process, MiB.
double StatusMib(const char* key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return std::atof(line.c_str() + std::strlen(key)) / 1024.0;
  return -1;
}

std::unique_ptr<TraceSink> Open(const std::string& format, const std::string& path, std::string* error) {
  if (format == "perfetto") return PerfettoWriter::Open(path, error);
  if (format == "et") return ExecutionTraceWriter::Open(path, error);
  return ChromeTraceWriter::Open(path, error);
}

int Child(const std::string& format, const std::string& path, uint64_t trees) {
  OpTable ops;
  for (int i = 0; i < 2000; ++i) {
    std::string name = "aten::op_" + std::to_string(i);
    ops.push_back({name, "Tensor", name + ".Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"});
  }
  std::string error;
  std::unique_ptr<TraceSink> sink = Open(format, path, &error);
  if (!sink) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  uint64_t base = 1'000'000'000'000;
  uint64_t start = NowNs();
  sink->Begin(ops, ClockSnapshot{base, base});
  sink->AddProcess({1000, "bench", "bench_writers"});
  for (uint32_t t = 0; t < 4; ++t) sink->AddThread({1000, 1000 + t, "worker"});
  std::vector<Slice> tree(7);
  const uint16_t depths[] = {0, 1, 2, 1, 2, 1, 2};
  double rss_10 = 0;
  uint64_t slices = 0;
  for (uint64_t k = 0; k < trees; ++k) {
    uint64_t t0 = base + k * 10'000;
    // A top-level op and three children, each with one child of its own.
    for (size_t i = 0; i < tree.size(); ++i) {
      uint64_t begin = i == 0 ? 0 : depths[i] == 1 ? i * 1000 : (i - 1) * 1000 + 100;
      uint64_t end = i == 0 ? 9000 : depths[i] == 1 ? i * 1000 + 900 : (i - 1) * 1000 + 800;
      tree[i] = Slice{t0 + begin, t0 + end, static_cast<uint32_t>((k * 7 + i) % ops.size()), depths[i], 0, 0};
    }
    sink->AddSliceTree(1000, 1000 + static_cast<uint32_t>(k % 4), tree);
    slices += tree.size();
    if (k == trees / 10) rss_10 = StatusMib("VmRSS:");
  }
  if (!sink->Finish(TraceStats(), &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  uint64_t ns = NowNs() - start;
  std::ifstream file(path, std::ios::ate | std::ios::binary);
  double bytes = static_cast<double>(file.tellg());
  std::printf("writer %s slices %" PRIu64 " ns_per_slice %.1f bytes_per_slice %.1f rss_mib_at_10pct %.1f "
              "peak_rss_mib %.1f\n",
              format.c_str(), slices, static_cast<double>(ns) / slices, bytes / slices, rss_10,
              StatusMib("VmHWM:"));
  std::fflush(stdout);
  unlink(path.c_str());
  return 0;
}

}  // namespace
}  // namespace torchprobe

int main(int argc, char** argv) {
  uint64_t slices = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1'050'000;
  std::string dir = argc > 2 ? argv[2] : "/tmp";
  int failed = 0;
  for (const char* format : {"perfetto", "et", "chrome"}) {
    pid_t pid = fork();
    if (pid == 0)
      _exit(torchprobe::Child(format, dir + "/bench_writers." + std::to_string(getpid()) + "." + format,
                              slices / 7 + 1));
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failed ? 1 : 0;
}
