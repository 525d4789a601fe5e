// The CUDA probe set without a GPU: the fake CUDA runtime, driver and NCCL
// (tests/fixtures/fake_cudart.c, fake_cuda_driver.c, fake_nccl.c) called from
// a fake CUDA libtorch's ops by cuda_loop. Names, what is left unprobed,
// nesting inside the launching op; recording needs root.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>

#include "tests/test_support.h"
#include "userspace/discover/cuda_probes.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

std::string CudaFixture(const std::string& name) {
  std::string binary = test::TorchprobeBinary();
  return binary.substr(0, binary.rfind('/')) + "/fixtures/cuda/" + name;
}

TEST(CudaCallNameTest, RuntimeDriverAndNcclEntryPointsOnly) {
  for (const char* call : {"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC",
                           "cudaMemcpyAsync_ptsz", "cudaMemsetAsync", "cudaGraphLaunch",
                           "cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize",
                           "cudaStreamWaitEvent", "cuLaunchKernel", "cuLaunchKernelEx", "ncclAllReduce",
                           "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter",
                           "ncclSend", "ncclRecv"})
    EXPECT_EQ(CudaCallName(call), call);
  for (const char* other : {"cudaGetDevice", "cudaMemcpy", "cudaLaunchKernelX", "pncclAllReduce",
                            "cuCtxGetCurrent", "_Z16cudaLaunchKernelPKv", ""})
    EXPECT_EQ(CudaCallName(other), std::nullopt) << other;
}

TEST(CudaProbesTest, EachFakeLibraryYieldsItsCallsWithReturns) {
  if (!test::FileExists(CudaFixture("cuda_loop"))) GTEST_SKIP() << "fixtures not built (make test)";
  const std::map<std::string, std::set<std::string>> want = {
      {"libcudart.so.13",
       {"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaMemcpyAsync", "cudaStreamSynchronize"}},
      {"libcuda.so.1", {"cuLaunchKernel"}},
      {"libnccl.so.2", {"ncclAllReduce", "ncclSend"}},
  };
  for (const auto& [library, calls] : want) {
    StatusOr<OpProbeSet> set = FindCudaProbes(CudaFixture(library));
    ASSERT_TRUE(set.ok()) << set.status().message();
    std::set<std::string> got;
    for (const OpProbe& probe : set->probes) {
      got.insert(probe.op.name);
      EXPECT_EQ(probe.symbol, probe.op.name);
      EXPECT_FALSE(probe.return_offsets.empty()) << probe.symbol;
    }
    EXPECT_EQ(got, calls) << library;
    EXPECT_EQ(set->without_returns, 0u);
  }
}

TEST(CudaProbesTest, LaunchesCopiesWaitsAndNcclNestedInTheirOps) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  if (!test::FileExists(CudaFixture("cuda_loop"))) GTEST_SKIP() << "fixtures not built (make test)";
  std::string dir = test::MakeTempDir(), out = dir + "/cuda.pftrace";
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "-q", "-o", out, "--", CudaFixture("cuda_loop"), "200"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("cuda_loop 200 ", 0), 0u) << r.out;
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  // 3 ops; 4 runtime, 1 driver and 2 NCCL calls (cudaGetDevice, cuCtxGetCurrent
  // and pncclAllReduce are not probed).
  EXPECT_EQ(trace.stats.probed_symbols, 3u + 4u + 1u + 2u);
  EXPECT_EQ(trace.stats.begin_repaired + trace.stats.end_repaired, 0u);
  std::map<std::string, size_t> calls;
  std::map<std::string, std::set<std::string>> parents;  // call -> names of its parents
  for (const DecodedThread& t : trace.threads) {
    for (const DecodedSlice& s : t.slices) {
      const std::string& name = trace.ops[s.op].name;
      ++calls[name];
      parents[name].insert(s.parent < 0 ? "" : trace.ops[t.slices[s.parent].op].name);
    }
  }
  EXPECT_EQ(calls["cudaLaunchKernel"], 100u) << "even iterations";
  EXPECT_EQ(calls["cudaLaunchKernel_ptsz"], 100u) << "odd iterations";
  EXPECT_EQ(calls["cuLaunchKernel"], 200u);
  EXPECT_EQ(calls["cudaMemcpyAsync"], 200u);
  EXPECT_EQ(calls["cudaStreamSynchronize"], 200u);
  EXPECT_EQ(calls["ncclAllReduce"], 200u);
  EXPECT_EQ(calls.count("pncclAllReduce") + calls.count("cudaGetDevice"), 0u);
  EXPECT_EQ(parents["cudaLaunchKernel"], std::set<std::string>{"aten::mm"});
  EXPECT_EQ(parents["cudaLaunchKernel_ptsz"], std::set<std::string>{"aten::mm"});
  EXPECT_EQ(parents["cuLaunchKernel"], std::set<std::string>{"aten::add"});
  EXPECT_EQ(parents["cudaMemcpyAsync"], std::set<std::string>{"aten::copy_"});
  EXPECT_EQ(parents["cudaStreamSynchronize"], std::set<std::string>{"aten::copy_"});
  EXPECT_EQ(parents["ncclAllReduce"], std::set<std::string>{""}) << "called outside any op";
  if (!test::TraceProcessor().empty()) {
    auto bad = test::QueryTrace(out,
                                "select name || '=' || value from stats where value > 0 "
                                "and (severity = 'error' or severity = 'data_loss')");
    EXPECT_TRUE(bad.empty()) << ::testing::PrintToString(bad);
    auto launches = test::QueryTrace(out, "select count(*) from slice where name = 'cuLaunchKernel'");
    EXPECT_EQ(launches, (std::vector<std::vector<std::string>>{{"200"}}));
  }
  unlink(out.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace torchprobe
