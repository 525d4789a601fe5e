// `make bench`: the event rate torchprobe's userspace sustains, without
// drops. A generator thread runs the bench_burst BPF program (through
// BPF_PROG_TEST_RUN) which emits nested op events into the op ring buffer
// through the same emit path as the probes, paced to --rate events/s; the
// main thread drains, models and writes them exactly as `record` does.
// Prints: rate <target> generated <n> consumed <n> dropped <n> seconds <s>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "userspace/attach/bpf_programs.h"
#include "userspace/base/clock.h"
#include "userspace/collect/ring_reader.h"
#include "userspace/export/perfetto_writer.h"
#include "userspace/model/op_stack_model.h"

namespace torchprobe {
namespace {

class FixedNames : public NameSource {
 public:
  ProcessInfo Process(uint32_t pid) override { return {pid, "bench", "bench_pipeline"}; }
  std::string Thread(uint32_t, uint32_t) override { return "generator"; }
};

int Run(double rate, double seconds, const std::string& output) {
  BpfConfig config;
  config.synthetic = true;
  StatusOr<std::unique_ptr<BpfPrograms>> bpf = BpfPrograms::Load(config);
  if (!bpf.ok()) {
    std::fprintf(stderr, "bench_pipeline: %s\n", bpf.status().message().c_str());
    return 1;
  }
  std::string error;
  std::unique_ptr<PerfettoWriter> writer = PerfettoWriter::Open(output, &error);
  if (!writer) {
    std::fprintf(stderr, "bench_pipeline: %s\n", error.c_str());
    return 1;
  }
  FixedNames names;
  OpStackModel model(writer.get(), &names);
  EventRouter router;
  router.On<tp_op_event>({EV_OP_ENTER, EV_OP_EXIT}, [&model](const tp_op_event& event) { model.OnOpEvent(event); });
  RingReader reader(&router);
  Status status = reader.Open((*bpf)->events_fd(), (*bpf)->ctl_events_fd());
  if (!status.ok()) {
    std::fprintf(stderr, "bench_pipeline: %s\n", status.message().c_str());
    return 1;
  }
  OpTable ops = {{"aten::linear", "", ""}, {"aten::addmm", "", ""}};
  writer->Begin(ops, ClockSnapshot{NowNs(), NowNs()});
  model.SetStart(NowNs());

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bursts{0};
  int prog_fd = bpf_program__fd((*bpf)->Program("bench_burst"));
  std::thread generator([&] {
    uint64_t start = NowNs();
    while (!stop.load(std::memory_order_relaxed)) {
      LIBBPF_OPTS(bpf_test_run_opts, opts);
      if (bpf_prog_test_run_opts(prog_fd, &opts) != 0) break;
      uint64_t done = bursts.fetch_add(1) + 1;
      if (rate > 0) {  // pace: the next burst is due at done * burst / rate
        uint64_t due = start + static_cast<uint64_t>(1e9 * done * TP_BENCH_BURST / rate);
        uint64_t now = NowNs();
        if (due > now) std::this_thread::sleep_for(std::chrono::nanoseconds(due - now));
      }
    }
  });
  uint64_t begin = NowNs();
  uint64_t end = begin + static_cast<uint64_t>(seconds * 1e9);
  while (NowNs() < end) reader.Poll(20);
  stop = true;
  generator.join();
  reader.DrainAll();
  double elapsed = (NowNs() - begin) / 1e9;
  model.FinishThreads(NowNs());
  uint64_t dropped = (*bpf)->Drops(DROP_RINGBUF_FULL);
  TraceStats& stats = model.stats();
  stats.dropped_events = dropped;
  if (!writer->Finish(stats, &error)) {
    std::fprintf(stderr, "bench_pipeline: %s\n", error.c_str());
    return 1;
  }
  std::printf("rate %.0f generated %" PRIu64 " consumed %" PRIu64 " dropped %" PRIu64
              " seconds %.3f\n",
              rate, bursts.load() * TP_BENCH_BURST, stats.events, dropped, elapsed);
  return 0;
}

}  // namespace
}  // namespace torchprobe

int main(int argc, char** argv) {
  double rate = 0, seconds = 3;
  std::string output = "/tmp/torchprobe-bench-pipeline.pftrace";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--rate") rate = std::atof(argv[i + 1]);
    else if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (flag == "-o") output = argv[i + 1];
  }
  return torchprobe::Run(rate, seconds, output);
}
