// The GPU side without a GPU: golden CUPTI record streams
// (tests/golden/*.txt) through the receiver and the join, with the CUDA call
// entries our probes would have made, into the writers; trace_processor and
// HTA (check-et-kineto) read what comes out.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cupti_stream_text.h"
#include "tests/fakes.h"
#include "tests/test_support.h"
#include "userspace/cupti/record_receiver.h"
#include "userspace/cupti/record_stream.h"
#include "userspace/export/chrome_trace_writer.h"
#include "userspace/export/execution_trace_writer.h"
#include "userspace/export/perfetto_writer.h"
#include "userspace/export/trace_fanout.h"
#include "userspace/model/cuda_model.h"
#include "userspace/model/gpu_join.h"

namespace torchprobe {
namespace {


// A golden stream played as the record session plays a real one: each CUDA
// call's entry through the CUDA model and the join (with the op open on its
// thread) into its slice's arguments, the collector's records into the receiver.
class GoldenGpu {
 public:
  explicit GoldenGpu(const std::string& golden) : cuda_(&ops_, nullptr), receiver_(&join_, true) {
    std::string error;
    EXPECT_TRUE(test::ParseGoldenStream(test::ReadFile(test::Golden(golden)), &stream_, &error)) << error;
    std::vector<std::string> open;  // names by depth
    for (const test::CpuLine& line : stream_.cpu) {
      uint32_t op = OpId(line.name);
      open.resize(line.depth);
      SliceArgs args;  // what the CUDA set reads at the call's entry, set on its slice
      if (line.call) {
        tp_cuda_call_event event{};
        event.op.hdr.type = EV_CUDA_CALL;
        event.op.hdr.pid = line.pid;
        event.op.hdr.tid = line.tid;
        event.op.hdr.ts_ns = line.begin_ns;
        event.op.op_id = op;
        args = cuda_.ArgsOf(event);
        uint64_t correlation = join_.OnCpuCall(line.pid, line.tid, line.begin_ns, line.name,
                                               open.empty() ? "" : open.back());
        if (correlation) args.push_back(SliceArg{kCorrelationArg, false, "", correlation});
      }
      open.push_back(line.name);
      Slice slice{line.begin_ns, line.end_ns, op, line.depth, 0, 0};
      if (!args.empty()) slice.args = std::make_shared<const SliceArgs>(std::move(args));
      slices_[{line.pid, line.tid}].push_back(slice);
    }
    receiver_.Feed(stream_.records.data(), stream_.records.size());
  }

  // The CPU side, then the GPU side, into `sink` (which takes GPU activity).
  template <typename Sink>
  void Write(Sink& sink, TraceStats* stats) {
    sink.Begin(ops_, ClockSnapshot{900'000'000, 900'000'000});
    uint32_t last_pid = 0;
    for (const auto& [thread, slices] : slices_) {
      auto [pid, tid] = thread;
      if (pid != last_pid) sink.AddProcess(ProcessInfo{pid, "python3", "python3 train.py", -1});
      last_pid = pid;
      sink.AddThread(ThreadInfo{pid, tid, "python3"});
      sink.AddSliceTree(pid, tid, slices);
    }
    EmitGpu(&sink, stats);
  }

  // The GPU side alone: every activity joined, into `sink`, and the counts.
  void EmitGpu(GpuSink* sink, TraceStats* stats) {
    join_.Emit(sink, stats);
    receiver_.PutStats(stats);
  }

 private:
  uint32_t OpId(const std::string& name) {
    for (uint32_t i = 0; i < ops_.size(); ++i)
      if (ops_[i].name == name) return i;
    ops_.push_back({name, "", ""});
    return static_cast<uint32_t>(ops_.size() - 1);
  }

  test::GoldenStream stream_;
  OpTable ops_;
  CudaModel cuda_;
  GpuJoin join_;
  CuptiReceiver receiver_;
  std::map<std::pair<uint32_t, uint32_t>, std::vector<Slice>> slices_;  // by (pid, tid)
};

TEST(GpuJoinTest, GoldenStepJoinsEachActivityToItsLaunchAndOp) {
  GoldenGpu golden("cupti_step.txt");
  test::GpuActivities got;
  TraceStats stats;
  golden.EmitGpu(&got, &stats);
  ASSERT_EQ(got.activities.size(), 7u);

  const GpuActivity& gemm = got.Named("volta_sgemm_128x64_nn");
  EXPECT_EQ(gemm.kind, GpuActivity::kKernel);
  EXPECT_EQ(gemm.op, "aten::mm");
  EXPECT_EQ(gemm.launch_call, "cudaLaunchKernel");  // the runtime call, not the driver call inside it
  EXPECT_EQ(gemm.launch_tid, 101u);
  EXPECT_NE(gemm.correlation, 0u);
  EXPECT_TRUE(gemm.first_of_launch);
  EXPECT_EQ(gemm.stream, 7u);
  EXPECT_EQ(gemm.grid[0], 64);
  EXPECT_EQ(gemm.block[0], 256);

  const GpuActivity& copy = got.Named("Memcpy HtoD (Pinned -> Device)");
  EXPECT_EQ(copy.op, "aten::copy_");
  EXPECT_EQ(copy.launch_call, "cudaMemcpyAsync");
  EXPECT_EQ(copy.bytes, 4096u);
  const GpuActivity& fill = got.Named("Memset (Device)");
  EXPECT_EQ(fill.launch_call, "cudaMemsetAsync");
  EXPECT_TRUE(fill.clamped);  // began before the copy on its stream ended
  EXPECT_EQ(fill.start_ns, copy.end_ns);
  EXPECT_EQ(fill.end_ns, 1000063000u);

  // A graph's kernels: both to the graph launch, one flow.
  const GpuActivity& a = got.Named("graph_kernel_a");
  const GpuActivity& b = got.Named("graph_kernel_b");
  EXPECT_EQ(a.launch_call, "cudaGraphLaunch");
  EXPECT_EQ(b.launch_call, "cudaGraphLaunch");
  EXPECT_EQ(a.op, "aten::add");
  EXPECT_EQ(a.correlation, b.correlation);
  EXPECT_TRUE(a.first_of_launch);
  EXPECT_FALSE(b.first_of_launch);
  EXPECT_EQ(a.graph_id, 5u);

  const GpuActivity& nccl = got.Named("ncclKernel_AllReduce_RING_LL_Sum_float");
  EXPECT_EQ(nccl.launch_call, "ncclAllReduce");  // the collective's kernel, to the NCCL call
  EXPECT_EQ(nccl.op, "c10d::allreduce_");

  std::set<uint64_t> correlations = {gemm.correlation, copy.correlation, fill.correlation, a.correlation,
                                     nccl.correlation};
  EXPECT_EQ(correlations.size(), 5u);  // one per launch

  const GpuActivity& lost = got.Named("elementwise_kernel(float*, int)");  // demangled; no API record
  EXPECT_EQ(lost.correlation, 0u);
  EXPECT_EQ(lost.op, "");

  EXPECT_EQ(stats.gpu_activities, 7u);
  EXPECT_EQ(stats.gpu_unjoined, 1u);
  EXPECT_EQ(stats.gpu_clamped, 1u);
  EXPECT_EQ(stats.gpu_api_calls, 6u);
  EXPECT_EQ(stats.gpu_processes, 1u);
  EXPECT_EQ(stats.gpu_records_dropped, 3u);
  EXPECT_EQ(stats.gpu_cupti_dropped, 1u);
  EXPECT_EQ(stats.gpu_unreadable, 0u);
}

// Recorded on an H100 (PyTorch 2.11, CUPTI 13): every kernel, copy and fill
// of three steps finds its launch, the cuBLAS GEMMs too, which cuBLAS
// launches through its own copy of the runtime (cudaLaunchKernelExC) so
// that our only entry is of the driver's cuLaunchKernelEx inside that call.
TEST(GpuJoinTest, RealH100StepsJoinEveryActivityCuBlasIncluded) {
  GoldenGpu golden("h100_torch211_steps.txt");
  test::GpuActivities got;
  TraceStats stats;
  golden.EmitGpu(&got, &stats);
  ASSERT_EQ(got.activities.size(), 57u);  // 17 kernels, a copy and a fill per step
  EXPECT_EQ(stats.gpu_unjoined, 0u);
  std::map<std::string, size_t> cublas_ops;  // op -> cuBLAS kernels
  for (const GpuActivity& a : got.activities) {
    EXPECT_FALSE(a.op.empty()) << a.name;
    if (a.kind != GpuActivity::kKernel) continue;
    if (a.name.rfind("void at::native::", 0) == 0) {
      EXPECT_EQ(a.launch_call, "cudaLaunchKernel") << a.name;  // the runtime call, not the driver's inside it
      continue;
    }
    // cuBLAS's own runtime calls the driver: cuLaunchKernelEx, or
    // cuLaunchKernel for its CUTLASS kernel.
    EXPECT_EQ(a.launch_call.rfind("cuLaunchKernel", 0), 0u) << a.name << " " << a.launch_call;
    ++cublas_ops[a.op];
  }
  // Per step: two addmm forward (a GEMM each), three mm backward (GEMMs, a
  // split-K reduction and a CUTLASS GEMM: four kernels).
  EXPECT_EQ(cublas_ops["aten::addmm"], 6u);
  EXPECT_EQ(cublas_ops["aten::mm"], 12u);
  EXPECT_EQ(cublas_ops.size(), 2u);
}

TEST(GpuJoinTest, AnEntryJoinsOneApiCallOnly) {
  // One cudaLaunchKernel entry seen by our probes, two launches by CUPTI:
  // the second's entry was lost, so its kernel joins nothing.
  GpuJoin join;
  uint64_t correlation = join.OnCpuCall(1, 2, 1000, "cudaLaunchKernel", "aten::mm");
  EXPECT_NE(correlation, 0u);
  EXPECT_EQ(join.OnCpuCall(1, 2, 1500, "cudaStreamSynchronize", "aten::mm"), 0u);  // makes no GPU work
  join.OnApiCall({1, 2, 1100, 1200, 7});
  join.OnApiCall({1, 2, 2100, 2200, 8});
  GpuActivity k1, k2;
  k1.pid = k2.pid = 1;
  k1.cupti_correlation = 7, k1.start_ns = 1300, k1.end_ns = 1400, k1.name = "k1";
  k2.cupti_correlation = 8, k2.start_ns = 2300, k2.end_ns = 2400, k2.name = "k2";
  join.OnActivity(k2);
  join.OnActivity(k1);
  test::GpuActivities got;
  TraceStats stats;
  join.Emit(&got, &stats);
  ASSERT_EQ(got.activities.size(), 2u);
  EXPECT_EQ(got.Named("k1").correlation, correlation);
  EXPECT_EQ(got.Named("k2").correlation, 0u);
  EXPECT_EQ(stats.gpu_unjoined, 1u);
  EXPECT_EQ(join.pending(), 0u);
}

TEST(GpuJoinTest, CallsAfterTheEndWaitForTheNextWindow) {
  GpuJoin join;
  uint64_t first = join.OnCpuCall(1, 2, 1000, "cudaLaunchKernel", "aten::mm");
  join.OnApiCall({1, 2, 1100, 1200, 7});
  join.OnApiCall({1, 2, 5100, 5200, 8});  // made after the window closed at 5000
  GpuActivity k1, k2;
  k1.pid = k2.pid = 1;
  k1.cupti_correlation = 7, k1.start_ns = 1300, k1.end_ns = 1400, k1.name = "k1";
  k2.cupti_correlation = 8, k2.start_ns = 5300, k2.end_ns = 5400, k2.name = "k2";
  join.OnActivity(k1);
  join.OnActivity(k2);
  test::GpuActivities window1, window2;
  TraceStats stats1, stats2;
  join.Emit(&window1, &stats1, 5000);
  ASSERT_EQ(window1.activities.size(), 1u);
  EXPECT_EQ(window1.activities[0].correlation, first);
  EXPECT_EQ(stats1.gpu_after_stop, 1u);
  EXPECT_EQ(join.pending(), 1u);
  // The next window saw the call that made k2.
  uint64_t second = join.OnCpuCall(1, 2, 5050, "cudaLaunchKernel", "aten::add");
  join.Emit(&window2, &stats2);
  ASSERT_EQ(window2.activities.size(), 1u);
  EXPECT_EQ(window2.activities[0].name, "k2");
  EXPECT_EQ(window2.activities[0].correlation, second);
  EXPECT_EQ(window2.activities[0].op, "aten::add");
  EXPECT_EQ(stats2.gpu_after_stop, 0u);
  EXPECT_EQ(join.pending(), 0u);
}

// The join holds at most `max_held` activities, API calls and launches
// until its Emit; past them each is counted.
TEST(GpuJoinBoundsTest, WhatTheJoinHoldsIsBounded) {
  GpuJoin join(2);
  EXPECT_NE(join.OnCpuCall(1, 1, 100, "cudaLaunchKernel", "aten::mm"), 0u);
  EXPECT_NE(join.OnCpuCall(1, 1, 200, "cudaLaunchKernel", "aten::mm"), 0u);
  EXPECT_EQ(join.OnCpuCall(1, 1, 300, "cudaLaunchKernel", "aten::mm"), 0u);
  for (uint32_t correlation = 1; correlation <= 3; ++correlation) {
    join.OnApiCall(GpuApiCall{1, 1, 100 * correlation + 10, 100 * correlation + 20, correlation});
    GpuActivity a;
    a.pid = 1;
    a.name = "k";
    a.start_ns = 100 * correlation + 30;
    a.end_ns = a.start_ns + 5;
    a.cupti_correlation = correlation;
    join.OnActivity(a);
  }
  EXPECT_EQ(join.pending(), 2u);
  test::GpuActivities collected;
  TraceStats stats;
  join.Emit(&collected, &stats);
  EXPECT_EQ(collected.activities.size(), 2u);
  EXPECT_EQ(stats.gpu_unjoined, 0u);
  EXPECT_EQ(stats.gpu_queue_full, 3u);  // a launch, an API call, an activity
  // Emitted, they make room again.
  EXPECT_NE(join.OnCpuCall(1, 1, 400, "cudaLaunchKernel", "aten::mm"), 0u);
}

TEST(CuptiReceiverTest, CuptiClockOffsetAndBadRecordsCounted) {
  GpuJoin join;
  CuptiReceiver receiver(&join, true);
  std::vector<uint8_t> stream;
  auto put = [&stream](const void* p, size_t n) {
    stream.insert(stream.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  tpc_hello hello{{TPC_HELLO, sizeof(tpc_hello), 5}, TPC_VERSION, TPC_CLOCK_CUPTI_OFFSET, 1000, 0, 0};
  put(&hello, sizeof(hello));
  tpc_memset fill{};
  fill.hdr = {TPC_MEMSET, sizeof(tpc_memset), 5};
  fill.a.start_ns = 10, fill.a.end_ns = 20, fill.bytes = 8;
  put(&fill, sizeof(fill));
  tpc_header unknown{99, sizeof(tpc_header) + 4, 5};  // a type from a newer collector: skipped
  put(&unknown, sizeof(unknown));
  put("abcd", 4);
  tpc_kernel cut{};
  cut.hdr = {TPC_KERNEL, sizeof(tpc_kernel), 5};
  cut.name_len = 50;  // says its name follows, but the record ends
  put(&cut, sizeof(cut));
  receiver.Feed(stream.data(), stream.size());
  receiver.Feed(stream.data(), 3);  // not even a header
  test::GpuActivities got;
  TraceStats stats;
  join.Emit(&got, &stats);
  receiver.PutStats(&stats);
  ASSERT_EQ(got.activities.size(), 1u);
  EXPECT_EQ(got.activities[0].start_ns, 1010u);  // CUPTI's clock + the offset: CLOCK_MONOTONIC
  EXPECT_EQ(got.activities[0].end_ns, 1020u);
  EXPECT_EQ(stats.gpu_unreadable, 3u);
  EXPECT_EQ(stats.gpu_processes, 1u);
}

// The CPU and GPU sides of a golden stream through all three writers.
void WriteGolden(const std::string& golden_name, const std::string& dir) {
  std::string error;
  TraceFanout fanout;
  auto perfetto = PerfettoWriter::Open(dir + "/g.pftrace", &error);
  ASSERT_TRUE(perfetto) << error;
  fanout.Add(std::move(perfetto));
  auto et = ExecutionTraceWriter::Open(dir + "/g.et.json", &error);
  ASSERT_TRUE(et) << error;
  fanout.Add(std::move(et));
  auto chrome = ChromeTraceWriter::Open(dir + "/g.json", &error);
  ASSERT_TRUE(chrome) << error;
  fanout.Add(std::move(chrome));
  GoldenGpu golden(golden_name);
  TraceStats stats;
  golden.Write(fanout, &stats);
  ASSERT_TRUE(fanout.Finish(stats, &error)) << error;
}

class GpuWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::MakeTempDir();
    WriteGolden("cupti_step.txt", dir_);
  }
  void TearDown() override { test::RemoveTempDir(dir_); }
  std::string dir_;
};

TEST_F(GpuWriterTest, PerfettoHasStreamTracksSlicesAndFlows) {
  if (test::TraceProcessor().empty()) GTEST_SKIP() << "no trace_processor_shell in ../shared/tools";
  std::string trace = dir_ + "/g.pftrace";
  using Rows = std::vector<std::vector<std::string>>;
  EXPECT_EQ(test::QueryTrace(trace, "select name from stats where value > 0 and severity in ('error', 'data_loss')"),
            Rows{});
  EXPECT_EQ(test::QueryTrace(trace,
                             "select p.name, t.name from track t join track p on t.parent_id = p.id "
                             "where t.name like 'Stream%' order by t.name"),
            (Rows{{"GPU 0", "Stream 13 (pid 100)"}, {"GPU 0", "Stream 21 (pid 100)"}, {"GPU 0", "Stream 7 (pid 100)"}}));
  // Each launch's CPU slice flows to the first GPU slice it made.
  EXPECT_EQ(test::QueryTrace(trace,
                             "select o.name, i.name from flow f join slice o on f.slice_out = o.id "
                             "join slice i on f.slice_in = i.id order by i.ts"),
            (Rows{{"cudaLaunchKernel", "volta_sgemm_128x64_nn"},
                  {"cudaMemcpyAsync", "Memcpy HtoD (Pinned -> Device)"},
                  {"cudaMemsetAsync", "Memset (Device)"},
                  {"cudaGraphLaunch", "graph_kernel_a"},
                  {"ncclAllReduce", "ncclKernel_AllReduce_RING_LL_Sum_float"}}));
  EXPECT_EQ(test::QueryTrace(trace,
                             "select replace(s.name, ', ', '|'), s.category, extract_arg(s.arg_set_id, 'debug.op'), s.dur from slice s "
                             "join track t on s.track_id = t.id where t.name like 'Stream%' order by s.ts"),
            (Rows{{"volta_sgemm_128x64_nn", "kernel", "aten::mm", "14000"},
                  {"Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", "aten::copy_", "4000"},
                  {"Memset (Device)", "gpu_memset", "aten::copy_", "1000"},
                  {"graph_kernel_a", "kernel", "aten::add", "4000"},
                  {"graph_kernel_b", "kernel", "aten::add", "3000"},
                  {"elementwise_kernel(float*|int)", "kernel", "[NULL]", "5000"},
                  {"ncclKernel_AllReduce_RING_LL_Sum_float", "kernel", "c10d::allreduce_", "12000"}}));
  EXPECT_EQ(test::QueryTrace(trace, "select int_value from args where key = 'debug.torchprobe.gpu_clamped'"),
            Rows{{"1"}});
}

TEST_F(GpuWriterTest, ChromeJsonInKinetoLayoutPassesHtaGpuAnalyses) {
  std::string text = test::ReadFile(dir_ + "/g.json");
  EXPECT_NE(text.find("\"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\""), std::string::npos);
  EXPECT_NE(text.find("\"cat\": \"kernel\", \"name\": \"volta_sgemm_128x64_nn\", \"pid\": 0, \"tid\": 7"),
            std::string::npos);
  EXPECT_NE(text.find("\"ph\": \"f\""), std::string::npos);
  test::CommandResult r = test::CheckEtKineto(dir_ + "/g.et.json", dir_ + "/g.json", dir_ + "/v");
  if (test::ValidatorsMissing(r))
    GTEST_SKIP() << "validators lack their Python packages (check-et-kineto --install-deps)";
  // trace_link (Chakra) is left out: it wants one GPU event per launch, and
  // the golden step has a graph of two kernels and a kernel that joined no
  // launch (Kineto's own traces of CUDA graphs get the same answer).
  for (const char* step : {"kineto-format", "ids", "hta-validate", "hta-load", "hta-kernel-breakdown",
                           "hta-launch-stats", "hta-temporal-breakdown", "hta-critical-path", "hta-et-correlation"})
    EXPECT_NE(r.out.find(std::string("PASS ") + step + ":"), std::string::npos) << step << "\n" << r.out;
}


// The real H100 steps in Kineto's layout: only the outermost API call of a
// launch is an event (no cuLaunchKernel inside cudaLaunchKernel, as in
// torch.profiler's own traces), each launch event with a correlation of
// its own, so Chakra's linker (trace_link) attaches every kernel.
TEST(GpuWriterRealTest, H100StepsPassHtaAndChakrasLinker) {
  std::string dir = test::MakeTempDir();
  WriteGolden("h100_torch211_steps.txt", dir);
  std::string text = test::ReadFile(dir + "/g.json");
  size_t driver_launches = 0;  // cuBLAS's CUTLASS GEMM, one a step: its driver call is outermost
  for (size_t at = text.find("\"name\": \"cuLaunchKernel\""); at != std::string::npos;
       at = text.find("\"name\": \"cuLaunchKernel\"", at + 1))
    ++driver_launches;
  EXPECT_EQ(driver_launches, 3u);
  test::CommandResult r = test::CheckEtKineto(dir + "/g.et.json", dir + "/g.json", dir + "/v");
  test::RemoveTempDir(dir);
  if (test::ValidatorsMissing(r))
    GTEST_SKIP() << "validators lack their Python packages (check-et-kineto --install-deps)";
  for (const char* step : {"kineto-format", "ids", "hta-load", "hta-kernel-breakdown", "hta-launch-stats",
                           "hta-temporal-breakdown", "hta-critical-path", "trace_link", "converter"})
    EXPECT_NE(r.out.find(std::string("PASS ") + step + ":"), std::string::npos) << step << "\n" << r.out;
}

}  // namespace
}  // namespace torchprobe
