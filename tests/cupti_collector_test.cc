// The CUPTI collector's whole path on every machine: `record --cupti`
// launches cupti_loop, which injects libtorchprobe_cupti.so as the CUDA
// driver would; a fake CUPTI (fake_cupti.c) hands the collector activity
// records from inside each runtime call; they reach torchprobe over its
// socket and come out joined to the uprobes' launches. On a machine with a
// GPU, tools/gpu-e2e does the same with the real driver and CUPTI.
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

std::string CudaFixture(const std::string& name) {
  std::string binary = test::TorchprobeBinary();
  return binary.substr(0, binary.rfind('/')) + "/fixtures/cuda/" + name;
}

using Rows = std::vector<std::vector<std::string>>;

class CuptiCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    if (!test::FileExists(CudaFixture("cupti_loop")) || !test::FileExists(test::CollectorPath()))
      GTEST_SKIP() << "fixtures or the collector not built (make test)";
    dir_ = test::MakeTempDir();
  }
  void TearDown() override {
    if (!dir_.empty()) test::RemoveTempDir(dir_);
  }
  // `record --cupti` of `cupti_loop ITERATIONS` with `env`: its trace (what
  // it said in *err).
  DecodedTrace RecordLoop(const std::string& iterations, const std::vector<std::string>& env, std::string* err) {
    std::string out = dir_ + "/loop" + iterations + ".pftrace";
    test::CommandResult r = test::RunCommand(
        {test::TorchprobeBinary(), "record", "--cupti", "-o", out, "--", CudaFixture("cupti_loop"), iterations}, env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    *err = r.err;
    DecodedTrace trace;
    std::string error;
    EXPECT_TRUE(ReadTrace(out, &trace, &error)) << error;
    return trace;
  }
  std::string dir_;
};

TEST_F(CuptiCollectorTest, KernelsAndCopiesJoinedToTheirLaunchesAndOps) {
  std::string out = dir_ + "/c.pftrace", chrome = dir_ + "/c.json";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "--cupti", "-q", "-o", out,
                                            "--chrome", chrome, "--", CudaFixture("cupti_loop"), "100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("cupti_loop 100 ", 0), 0u) << r.out;
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  EXPECT_EQ(trace.stats.gpu_processes, 1u);
  EXPECT_EQ(trace.stats.gpu_activities, 200u);
  EXPECT_EQ(trace.stats.gpu_unjoined, 0u);
  EXPECT_EQ(trace.stats.gpu_api_calls, 200u);
  EXPECT_EQ(trace.stats.gpu_records_dropped + trace.stats.gpu_cupti_dropped + trace.stats.gpu_unreadable, 0u);
  std::map<std::pair<std::string, std::string>, size_t> by_op;  // (activity, op) -> count
  for (const DecodedGpuActivity& g : trace.gpu) ++by_op[{g.name, g.op}];
  EXPECT_EQ(by_op, (std::map<std::pair<std::string, std::string>, size_t>{
                       {{"gemm_kernel(float*, float const*, float const*, int)", "aten::mm"}, 100},
                       {{"Memcpy HtoD (Pinned -> Device)", "aten::copy_"}, 100}}));
  if (!test::TraceProcessor().empty()) {
    EXPECT_EQ(test::QueryTrace(out, "select name from stats where value > 0 and severity in ('error', 'data_loss')"),
              Rows{});
    // Every activity has a flow from its launch, and none starts before it.
    EXPECT_EQ(test::QueryTrace(out,
                               "select o.name, count(*), sum(i.ts < o.ts) from flow f "
                               "join slice o on f.slice_out = o.id join slice i on f.slice_in = i.id "
                               "group by 1 order by 1"),
              (Rows{{"cudaLaunchKernel", "50", "0"},
                    {"cudaLaunchKernel_ptsz", "50", "0"},
                    {"cudaMemcpyAsync", "100", "0"}}));
  }
  std::string json = test::ReadFile(chrome);
  EXPECT_NE(json.find("\"cat\": \"kernel\""), std::string::npos);
  EXPECT_NE(json.find("\"cat\": \"ac2g\""), std::string::npos);
  test::CommandResult report = test::RunCommand({test::TorchprobeBinary(), "report", out});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("GPU time by op"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("Top kernels"), std::string::npos) << report.out;
}

// CUPTI hands over a whole buffer at once (here at exit: megabytes), far
// more datagrams than the kernel queues on a unix socket (10 by default):
// the collector's sender waits for torchprobe's reader instead of dropping.
TEST_F(CuptiCollectorTest, ABufferBurstArrivesWhole) {
  std::string err;
  DecodedTrace trace = RecordLoop("20000", {}, &err);
  EXPECT_EQ(trace.stats.gpu_records_dropped, 0u);
  EXPECT_EQ(trace.stats.gpu_activities, 40000u);
  EXPECT_EQ(trace.stats.gpu_api_calls, 40000u);
  EXPECT_EQ(trace.stats.gpu_unjoined, 0u);
}

// A process whose CUPTI is not the one the collector was built for: its
// records are still read, and the user is told in one line.
TEST_F(CuptiCollectorTest, AnotherCuptiVersionIsSaid) {
  std::string err;
  DecodedTrace trace = RecordLoop("20", {"FAKE_CUPTI_VERSION=130001"}, &err);
  EXPECT_NE(err.find("CUPTI API version 130001 in the process, the collector was built for 18"), std::string::npos)
      << err;
  EXPECT_EQ(trace.stats.gpu_activities, 40u);
}

TEST_F(CuptiCollectorTest, AnotherSubscriberLeavesTheCpuSideOnly) {
  std::string err;
  DecodedTrace trace = RecordLoop("20", {"FAKE_CUPTI_BUSY=1"}, &err);
  EXPECT_NE(err.find("another CUPTI subscriber"), std::string::npos) << err;
  EXPECT_TRUE(trace.gpu.empty());
  EXPECT_EQ(trace.stats.gpu_processes, 0u);
  EXPECT_EQ(trace.slice_count(), 20u * 5);  // mm, a launch, copy_, a copy, a sync
}

TEST_F(CuptiCollectorTest, WithoutTorchprobeListeningTheTargetRunsUnchanged) {
  test::CommandResult plain = test::RunCommand({CudaFixture("cupti_loop"), "30"});
  test::CommandResult injected = test::RunCommand(
      {CudaFixture("cupti_loop"), "30"},
      {"CUDA_INJECTION64_PATH=" + test::CollectorPath(), "TORCHPROBE_CUPTI_SOCKET=@torchprobe-cupti-nobody"});
  ASSERT_EQ(plain.exit_code, 0);
  EXPECT_EQ(injected.exit_code, 0) << injected.err;
  // "cupti_loop N <ns per iteration> <checksum>": the same but for the time.
  auto result = [](const std::string& out) { return out.substr(0, out.find(' ', 11)) + out.substr(out.rfind(' ')); };
  EXPECT_EQ(result(injected.out), result(plain.out)) << injected.out;
  EXPECT_EQ(result(plain.out), "cupti_loop 30 990\n");
  EXPECT_EQ(injected.err, "");
}

TEST(CuptiUsageTest, CuptiNeedsALaunchedCommand) {
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "--cupti", "--pid", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cupti goes with a launched command"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace torchprobe
