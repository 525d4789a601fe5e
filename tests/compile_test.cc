// torch.compile regions on PyTorch 2.6: `Torch-Compiled Region: G/F`, `TorchDynamo
// Cache Lookup` and the compiled graphs' ops inside them, once per call as
// torch.profiler counts them, and report's ProfileMetrics-style figures
// against the same figures computed from the profiler's events of the same
// script (tests/fixtures/compiled_regions.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"
#include "userspace/base/op_table.h"
#include "userspace/report/compile_summary.h"
#include "userspace/report/report.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

// ---- Tier 1: the figures on a trace made here ----

TEST(CompileSummaryTest, OutermostOpsInsideRegionsGraphsLookupsAndSteps) {
  DecodedTrace trace;
  trace.ops = {{"ProfilerStep#0", "", "", kUserAnnotation},
               {"Torch-Compiled Region: 0/0", "", "", kUserAnnotation},
               {"TorchDynamo Cache Lookup", "", "", kUserAnnotation},
               {"aten::sin", "", ""},
               {"aten::empty", "", ""},
               {"_compile.compile_inner (dynamo_timed)", "", "", kUserAnnotation}};
  DecodedThread t;
  // step { lookup, region { sin { empty } }, sin, phase { empty } }
  auto add = [&](uint32_t op, int32_t parent, uint64_t begin, uint64_t end) {
    uint16_t depth = parent < 0 ? 0 : t.slices[parent].depth + 1;
    t.slices.push_back(DecodedSlice{begin, end, op, depth, parent});
  };
  add(0, -1, 0, 100);
  add(2, 0, 1, 2);
  add(1, 0, 3, 20);
  add(3, 2, 4, 14);
  add(4, 3, 5, 6);
  add(3, 0, 30, 35);
  add(5, 0, 40, 90);
  add(4, 6, 41, 42);
  trace.threads.push_back(t);
  CompileSummary s = SummarizeCompile(trace);
  EXPECT_EQ(s.regions, 1u);
  EXPECT_EQ(s.graphs, (std::set<std::string>{"Torch-Compiled Region: 0/0"}));
  EXPECT_EQ(s.cache_lookups, 1u);
  EXPECT_EQ(s.steps, 1u);
  EXPECT_EQ(s.compile_phases, 1u);
  EXPECT_EQ(s.compile_ns, 50u);
  EXPECT_EQ(s.ops, 3u) << "sin, sin, empty: the nested empty is not outermost";
  EXPECT_EQ(s.op_ns, 10u + 5u + 1u);
  EXPECT_EQ(s.captured_ops, 1u);
  EXPECT_EQ(s.captured_ns, 10u);
  std::ostringstream out;
  PrintCompile(s, out);
  EXPECT_NE(out.str().find("1 compiled regions of 1 compiled graphs, 1 cache lookups"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("regions per step: 1.00"), std::string::npos) << out.str();
  std::ostringstream none;
  PrintCompile(CompileSummary{}, none);
  EXPECT_EQ(none.str(), "");
}

// ---- Tier 2: PyTorch 2.6 ----

bool IsCall(const std::string& name) { return name.starts_with("## CALL "); }
bool Kept(const std::string& name) {
  return name.starts_with(kCompiledRegionPrefix) || name == kCacheLookup || IsCall(name);
}

struct Profiled {
  std::map<std::string, uint64_t> figures;
  std::map<std::string, uint64_t> inside;  // "NAME <- PARENT"
};

Profiled ParseProfile(const std::string& text) {
  Profiled p;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells = test::SplitTabs(line);
    if (cells.size() == 3 && cells[0] == "figure") p.figures[cells[1]] = std::stoull(cells[2]);
    if (cells.size() == 4 && cells[0] == "inside") p.inside[cells[1] + " <- " + cells[2]] = std::stoull(cells[3]);
  }
  return p;
}

// As compiled_regions.py's "inside" lines: regions, lookups and outermost
// ops inside CALL ranges, by their nearest region, lookup or CALL.
std::map<std::string, uint64_t> TracedInside(const DecodedTrace& trace) {
  std::map<std::string, uint64_t> inside;
  for (const DecodedThread& t : trace.threads) {
    for (const DecodedSlice& s : t.slices) {
      const std::string& name = trace.ops[s.op].name;
      bool is_op = trace.ops[s.op].category.empty();
      if (IsCall(name) || (!is_op && !Kept(name))) continue;
      std::string parent;
      bool op_above = false, in_call = false;
      for (int32_t a = s.parent; a >= 0; a = t.slices[a].parent) {
        const OpInfo& up = trace.ops[t.slices[a].op];
        op_above |= up.category.empty();
        if (parent.empty() && Kept(up.name)) parent = IsCall(up.name) ? "## CALL # ##" : up.name;
        in_call |= IsCall(up.name);
      }
      if (in_call && !(is_op && op_above)) ++inside[name + " <- " + parent];
    }
  }
  return inside;
}

TEST(CompileTest, RegionsOncePerCallAndReportFiguresMatchTorchProfilerOn26) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  const int kCalls = 10;
  std::string dir = test::MakeTempDir(), out = dir + "/compiled.pftrace";
  std::string name = "/tmp/torchprobe-compile-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", test::Fixture("compiled_regions.py"), root + name + ".py"}).exit_code, 0);
  std::vector<std::string> record = {test::TorchprobeBinary(), "record", "-q", "--step-marker", "## CALL *",
                                     "-o", out, "--"};
  for (const std::string& arg : test::Torch2Python(root, name + ".py", {"--calls", std::to_string(kCalls)}))
    record.push_back(arg);
  test::CommandResult r = test::RunCommand(record);
  test::CommandResult p = test::RunCommand(
      test::Torch2Python(root, name + ".py", {"--calls", std::to_string(kCalls), "--profile", name + ".txt"}));
  Profiled profiled = ParseProfile(test::ReadFile(root + name + ".txt"));
  for (const char* suffix : {".py", ".txt"}) unlink((root + name + suffix).c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(p.exit_code, 0) << p.err;
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  test::RemoveTempDir(dir);

  // Once per call: each graph's region, the lookups, the compiled ops inside.
  std::map<std::string, uint64_t> inside = TracedInside(trace);
  EXPECT_EQ(inside, profiled.inside);
  EXPECT_EQ(inside["Torch-Compiled Region: 0/0 <- ## CALL # ##"], uint64_t{kCalls});
  EXPECT_EQ(inside["Torch-Compiled Region: 1/0 <- Torch-Compiled Region: 0/0"], uint64_t{kCalls});
  EXPECT_EQ(inside["aten::sin <- Torch-Compiled Region: 0/0"], uint64_t{kCalls});
  EXPECT_EQ(inside["aten::cos <- Torch-Compiled Region: 1/0"], uint64_t{kCalls});

  // report's figures, over the whole run (the compiling first call too).
  CompileSummary s = SummarizeCompile(trace);
  EXPECT_EQ(s.regions, profiled.figures["regions"]);
  EXPECT_EQ(s.graphs.size(), profiled.figures["graphs"]);
  EXPECT_EQ(s.cache_lookups, profiled.figures["cache_lookups"]);
  EXPECT_EQ(s.steps, profiled.figures["calls"]) << "one step per call (--step-marker)";
  // Ops: the same definitions; the profiler's parents come from
  // microsecond timestamps, so a tie may move one.
  EXPECT_NEAR(static_cast<double>(s.ops), static_cast<double>(profiled.figures["ops"]), 0.01 * s.ops);
  EXPECT_NEAR(static_cast<double>(s.captured_ops), static_cast<double>(profiled.figures["captured_ops"]),
              0.01 * s.captured_ops);
  EXPECT_GE(s.compile_phases, 1u) << "dynamo_timed ranges";
  std::ostringstream report;
  PrintReport(trace, report);
  std::string want = "torch.compile: " + std::to_string(s.regions) + " compiled regions of 2 compiled graphs";
  EXPECT_NE(report.str().find(want), std::string::npos) << report.str();
  std::printf("[ compile ] %llu regions, %zu graphs, %llu lookups; ops %llu/%llu in regions (profiler %llu/%llu)\n",
              static_cast<unsigned long long>(s.regions), s.graphs.size(),
              static_cast<unsigned long long>(s.cache_lookups), static_cast<unsigned long long>(s.captured_ops),
              static_cast<unsigned long long>(s.ops),
              static_cast<unsigned long long>(profiled.figures["captured_ops"]),
              static_cast<unsigned long long>(profiled.figures["ops"]));
}

}  // namespace
}  // namespace torchprobe
