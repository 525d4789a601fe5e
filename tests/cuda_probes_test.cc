// The CUDA probe set without a GPU: arguments decoded from synthetic entry
// events, kernel names from this binary's own symbols, and the fake CUDA runtime, driver and NCCL
// (tests/fixtures/fake_cudart.c, fake_cuda_driver.c, fake_nccl.c) called from
// a fake CUDA libtorch's ops by cuda_loop. Names, what is left unprobed,
// nesting inside the launching op; recording needs root.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "tests/fakes.h"
#include "tests/test_support.h"
#include "userspace/discover/address_symbols.h"
#include "userspace/discover/cuda_probes.h"
#include "userspace/model/cuda_call_info.h"
#include "userspace/model/cuda_model.h"
#include "userspace/model/op_stack_model.h"
#include "userspace/report/cuda_summary.h"
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

tp_cuda_call_event CallEvent(std::initializer_list<uint64_t> regs, std::initializer_list<uint64_t> stack) {
  tp_cuda_call_event event = {};
  event.op.hdr.type = EV_CUDA_CALL;
  event.op.hdr.size = sizeof(event);
  size_t i = 0;
  for (uint64_t r : regs) event.regs[i++] = r;
  i = 0;
  for (uint64_t s : stack) event.stack[i++] = s;
  return event;
}

TEST(CudaCallInfoTest, ArgumentsFromRegistersAndStackPerSignature) {
  // cudaLaunchKernel(func, dim3{8,2,1}, dim3{256,1,1}, args, shared 512, stream 0x7):
  // each dim3 takes two registers ({x,y}, {z}); shared memory and stream are on the stack.
  CudaCallInfo launch = DecodeCudaCall(
      "cudaLaunchKernel_ptsz", CallEvent({0x401000, 8 | 2ull << 32, 1, 256 | 1ull << 32, 1, 0xa0}, {512, 0x7}));
  ASSERT_TRUE(launch.known);
  EXPECT_TRUE(launch.host_stub);
  EXPECT_EQ(launch.function, 0x401000u);
  EXPECT_EQ(std::vector<uint32_t>(launch.grid, launch.grid + 3), (std::vector<uint32_t>{8, 2, 1}));
  EXPECT_EQ(std::vector<uint32_t>(launch.block, launch.block + 3), (std::vector<uint32_t>{256, 1, 1}));
  EXPECT_EQ(launch.shared_mem, 512u);
  EXPECT_EQ(launch.stream, 0x7u);
  // cuLaunchKernel(f, 16, 1, 1, 64, 1 | block.z, shared, stream on the stack)
  CudaCallInfo driver = DecodeCudaCall("cuLaunchKernel", CallEvent({0x1000, 16, 1, 1, 64, 1}, {2, 128, 0x9}));
  EXPECT_FALSE(driver.host_stub) << "a CUfunction is no host address";
  EXPECT_EQ(driver.block[2], 2u);
  EXPECT_EQ(driver.shared_mem, 128u);
  EXPECT_EQ(driver.stream, 0x9u);
  // ncclReduce(send, recv, 1000 x ncclFloat16, op, root 3, comm on the stack, stream)
  CudaCallInfo reduce = DecodeCudaCall("ncclReduce", CallEvent({1, 2, 1000, 6, 0, 3}, {0xc0, 0x5}));
  EXPECT_EQ(reduce.bytes, 2000u);
  EXPECT_EQ(reduce.peer, 3);
  EXPECT_EQ(reduce.comm, 0xc0u);
  EXPECT_EQ(reduce.stream, 0x5u);
  // ncclSend(buf, 10 x ncclInt64, peer 1, comm, stream): all in registers
  CudaCallInfo send = DecodeCudaCall("ncclSend", CallEvent({1, 10, 4, 1, 0xc0, 0x5}, {}));
  EXPECT_EQ(send.bytes, 80u);
  EXPECT_EQ(send.peer, 1);
  EXPECT_EQ(send.stream, 0x5u);
  CudaCallInfo copy = DecodeCudaCall("cudaMemcpyAsync", CallEvent({1, 2, 4096, 2, 0x7}, {}));
  EXPECT_EQ(copy.bytes, 4096u);
  EXPECT_EQ(copy.copy_kind, 2);
  EXPECT_EQ(copy.stream, 0x7u);
  // An unknown datatype gives no bytes rather than wrong ones.
  EXPECT_FALSE(DecodeCudaCall("ncclAllReduce", CallEvent({1, 2, 10, 99, 0, 0}, {})).has_bytes);
  EXPECT_FALSE(DecodeCudaCall("cudaGetDevice", CallEvent({}, {})).known);
}

TEST(CudaSummaryTest, CallNamesOfTheRuntimeDriverAndNccl) {
  for (const char* call : {"cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "ncclSend"})
    EXPECT_TRUE(IsCudaCallName(call)) << call;
  for (const char* other : {"aten::cumsum", "cummax", "cu", "c10d::allreduce_", "gloo:all_reduce"})
    EXPECT_FALSE(IsCudaCallName(other)) << other;
}

TEST(CudaModelTest, ACallsArgumentsGoOnTheSliceItsEntryOpenedAndNoOther) {
  OpTable ops = {{"aten::mm", "", ""}, {"cudaMemcpyAsync", "", ""}};
  CudaModel cuda(&ops, nullptr);
  tp_cuda_call_event event = CallEvent({1, 2, 64, 1, 0x7}, {});
  event.op.op_id = 1;
  event.op.hdr.pid = 10, event.op.hdr.tid = 11, event.op.hdr.ts_ns = 1000;
  SliceArgs args = cuda.ArgsOf(event);
  std::map<std::string, std::string> got;
  for (const SliceArg& a : args) got[a.name] = a.is_text ? a.text : std::to_string(a.number);
  EXPECT_EQ(got, (std::map<std::string, std::string>{{"bytes", "64"}, {"copy kind", "1"}, {"stream", "0x7"}}));
  event.op.op_id = 7;  // past the op table
  EXPECT_TRUE(cuda.ArgsOf(event).empty());

  test::RecordingSink sink;
  test::FixedNames names;
  OpStackModel model(&sink, &names);
  model.OnOpEvent(test::OpEvent(EV_OP_ENTER, 10, 11, 500, 0, 0x900));  // aten::mm
  auto shared = std::make_shared<const SliceArgs>(args);
  EXPECT_FALSE(model.SetArgs(10, 11, 1000, shared)) << "its entry opened no slice yet";
  model.OnOpEvent(test::OpEvent(EV_OP_ENTER, 10, 11, 1000, 1, 0x800));  // the call
  EXPECT_FALSE(model.SetArgs(10, 12, 1000, shared)) << "another thread";
  EXPECT_TRUE(model.SetArgs(10, 11, 1000, shared));
  model.OnOpEvent(test::OpEvent(EV_OP_EXIT, 10, 11, 1100, 1, 0x800));
  model.OnOpEvent(test::OpEvent(EV_OP_EXIT, 10, 11, 1200, 0, 0x900));
  model.FinishThreads(2000);
  ASSERT_EQ(sink.all.size(), 2u);
  EXPECT_EQ(sink.all[0].args, nullptr) << "the caller has none";
  ASSERT_NE(sink.all[1].args, nullptr);
  EXPECT_EQ(sink.all[1].args->size(), 3u);
}

TEST(AddressSymbolsTest, NamesAFunctionOfThisProcessDemangled) {
  AddressSymbols symbols;
  uint64_t address = reinterpret_cast<uint64_t>(&DecodeCudaCall);
  EXPECT_EQ(symbols.Name(getpid(), address).rfind("torchprobe::DecodeCudaCall(", 0), 0u)
      << symbols.Name(getpid(), address);
  EXPECT_EQ(symbols.Name(getpid(), address + 1), symbols.Name(getpid(), address)) << "inside it";
  EXPECT_EQ(symbols.first_failure(), "") << "every name found so far";
  EXPECT_EQ(symbols.Name(getpid(), 8), "") << "unmapped";
  // Said, so that a summary can tell why names are missing.
  EXPECT_NE(symbols.first_failure().find("address 0x8: in no file the process maps"), std::string::npos)
      << symbols.first_failure();
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
    // Each call's arguments, the same on every call of it.
    auto args = test::QueryTrace(
        out,
        // QueryTrace splits on commas: the values' ", " become "|".
        "select distinct s.name, a.key, replace(a.display_value, ', ', '|') from slice s "
        "join args a using (arg_set_id) "
        "where a.key in ('debug.kernel', 'debug.grid', 'debug.block', 'debug.stream', 'debug.bytes', "
        "'debug.count', 'debug.copy kind') order by 1, 2");
    std::set<std::string> got;
    for (const auto& row : args) got.insert(::testing::PrintToString(row));
    auto row = [](std::string call, std::string key, std::string value) {
      for (size_t comma; (comma = value.find(", ")) != std::string::npos;) value.replace(comma, 2, "|");
      return ::testing::PrintToString(std::vector<std::string>{call, "debug." + key, value});
    };
    for (const char* launch : {"cudaLaunchKernel", "cudaLaunchKernel_ptsz"}) {
      EXPECT_TRUE(got.count(row(launch, "kernel", "gemm_kernel(float*, float const*, float const*, int)")))
          << launch << " named by its host stub; got " << ::testing::PrintToString(got);
      EXPECT_TRUE(got.count(row(launch, "grid", "[8, 2, 1]"))) << launch;
      EXPECT_TRUE(got.count(row(launch, "block", "[256, 1, 1]"))) << launch;
      EXPECT_TRUE(got.count(row(launch, "stream", "0x7"))) << launch;
    }
    EXPECT_TRUE(got.count(row("cuLaunchKernel", "grid", "[16, 1, 1]")));
    EXPECT_TRUE(got.count(row("cuLaunchKernel", "stream", "0x7")));
    EXPECT_TRUE(got.count(row("cudaMemcpyAsync", "bytes", "4096")));
    EXPECT_TRUE(got.count(row("cudaMemcpyAsync", "copy kind", "1")));
    EXPECT_TRUE(got.count(row("cudaStreamSynchronize", "stream", "0x7")));
    EXPECT_TRUE(got.count(row("ncclAllReduce", "count", "1024")));
    EXPECT_TRUE(got.count(row("ncclAllReduce", "bytes", "4096")) ) << "1024 x float32";
    EXPECT_TRUE(got.count(row("ncclAllReduce", "stream", "0x7"))) << "the 7th argument, on the stack";
    EXPECT_EQ(got.size(), 18u) << "one value per call and key: " << ::testing::PrintToString(got);
  }
  // report: the CUDA table counts each call under its op.
  test::CommandResult report = test::RunCommand({test::TorchprobeBinary(), "report", out});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("CUDA calls by op"), std::string::npos) << report.out;
  std::map<std::pair<std::string, std::string>, uint64_t> table;
  for (const CudaCallRow& row : SummarizeCudaCalls(trace)) table[{row.op, row.call}] = row.calls;
  EXPECT_EQ(table, (std::map<std::pair<std::string, std::string>, uint64_t>{
                       {{"aten::mm", "cudaLaunchKernel"}, 100},
                       {{"aten::mm", "cudaLaunchKernel_ptsz"}, 100},
                       {{"aten::add", "cuLaunchKernel"}, 200},
                       {{"aten::copy_", "cudaMemcpyAsync"}, 200},
                       {{"aten::copy_", "cudaStreamSynchronize"}, 200},
                       {{"", "ncclAllReduce"}, 200}}));
  unlink(out.c_str());
  rmdir(dir.c_str());
}

TEST(CudaProbesTest, AttachedByPidLaunchesAreNamedAndNested) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  if (!test::FileExists(CudaFixture("cuda_loop"))) GTEST_SKIP() << "fixtures not built (make test)";
  std::string dir = test::MakeTempDir(), out = dir + "/pid.pftrace";
  // Loops until killed: however slow the attach, it is still running.
  pid_t target = test::Spawn({CudaFixture("cuda_loop"), "2000000000"}, "/dev/null");
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--pid",
                                            std::to_string(target), "--duration", "1", "-o", out});
  kill(target, SIGKILL);
  test::Wait(target);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  size_t launches = 0;
  for (const DecodedThread& t : trace.threads) {
    for (const DecodedSlice& s : t.slices) {
      if (trace.ops[s.op].name != "cudaLaunchKernel" || s.parent < 0) continue;
      ++launches;
      EXPECT_EQ(trace.ops[t.slices[s.parent].op].name, "aten::mm");
    }
  }
  EXPECT_GT(launches, 0u);
  if (!test::TraceProcessor().empty()) {
    auto kernels = test::QueryTrace(
        out, "select distinct replace(display_value, ', ', '|') from args where key = 'debug.kernel'");
    EXPECT_EQ(kernels, (std::vector<std::vector<std::string>>{
                           {"gemm_kernel(float*|float const*|float const*|int)"}}));
  }
  unlink(out.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace torchprobe
