// Autograd nodes: the engine's `autograd::engine::evaluate_function: NODE`
// ranges and each node's own range, as torch.profiler shows them, with no
// profiler in the target. Names and the model on synthetic events first,
// then the probe points in libtorch 1.13 and 2.6, then a small model's
// backward on 1.13 and 2.6 attached by pid against PyTorch's execution graph
// of the same script, and a backward that throws.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fakes.h"
#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/discover/autograd_probes.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/op_probes.h"
#include "userspace/discover/py_node.h"
#include "userspace/model/autograd_model.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

using namespace std::string_literals;

// ---- Tier 1: names and the model ----

TEST(AutogradNamesTest, AsNodeNameReturnsThem) {
  EXPECT_EQ(NodeName("torch::autograd::generated::AddmmBackward0"), "AddmmBackward0");
  EXPECT_EQ(NodeName("torch::autograd::AccumulateGrad"), "torch::autograd::AccumulateGrad");
  EXPECT_EQ(NodeNameOfVtable("vtable for torch::autograd::generated::MmBackward0"), "MmBackward0");
  EXPECT_EQ(NodeNameOfVtable("vtable for torch::autograd::GraphRoot"), "torch::autograd::GraphRoot");
  EXPECT_EQ(NodeNameOfVtable("torch::autograd::GraphRoot::apply"), std::nullopt);
  EXPECT_EQ(NodeApplyName("_ZN5torch8autograd9generated14AddmmBackward05applyEOSt6vectorIN2at6TensorESaIS5_EE"),
            "AddmmBackward0");
  EXPECT_EQ(NodeApplyName("_ZN5torch8autograd14AccumulateGrad5applyEOSt6vectorIN2at6TensorESaIS4_EE"),
            "torch::autograd::AccumulateGrad");
  // Not apply(variable_list&&): 2.x's compiled-autograd twin, another method.
  EXPECT_EQ(NodeApplyName("_ZN5torch8autograd9generated14AddmmBackward016apply_with_savedERKSt6vectorIN2at6TensorESaIS5_EERNS_6dynamo8autograd18SwapSavedVariablesE"),
            std::nullopt);
  EXPECT_EQ(NodeApplyName("_ZN2at4_ops10addmm_call4callEv"), std::nullopt);
}

tp_op_event Op(uint16_t type, uint32_t tid, uint32_t op, uint64_t frame) {
  return test::OpEvent(type, 1, tid, 0, op, frame);
}

tp_autograd_node_event EngineEntry(uint32_t tid, uint32_t op, uint64_t frame, uint64_t vtable) {
  tp_autograd_node_event e = {};
  e.op = Op(EV_AUTOGRAD_NODE, tid, op, frame);
  e.op.hdr.size = sizeof(e);
  e.vtable = vtable;
  return e;
}

struct ModelFixture {
  OpTable ops{{"aten::mm", "", ""},
              {std::string(kUnnamedNode), "", ""},
              {std::string(kPyNodeClass), "", "", kAutogradNode}};  // PyNode::apply's probe
  TraceStats stats;
  std::vector<tp_op_event> out;
  int grew = 0;
  AutogradModel model{&ops,
                      [](uint32_t, uint64_t vtable) -> std::string {
                        if (vtable == 0x100) return "vtable for torch::autograd::generated::MmBackward0";
                        if (vtable == 0x200) return "vtable for torch::autograd::PyNode";
                        return "";
                      },
                      [](uint32_t, uint64_t type) -> std::optional<std::string> {
                        if (type == 0x300) return "DoubleBackward";
                        return std::nullopt;
                      },
                      [this] { ++grew; }};
  ModelFixture() {
    model.SetOutput([this](const tp_op_event& e) { out.push_back(e); }, &stats);
  }
  std::string Name(const tp_op_event& e) const { return ops[e.op_id].name; }
};

TEST(AutogradModelTest, EngineCallsAreNamedAfterTheirNodeAndCloseByTheirReturn) {
  ModelFixture f;
  f.model.OnNodeEntry(EngineEntry(7, 1, 0x9000, 0x100));
  f.model.OnOpEvent(Op(EV_OP_ENTER, 7, 0, 0x8000));
  f.model.OnOpEvent(Op(EV_OP_EXIT, 7, 0, 0x8000));
  f.model.OnOpEvent(Op(EV_OP_EXIT, 7, 1, 0x9000));
  f.model.OnNodeEntry(EngineEntry(7, 1, 0x9000, 0x100));  // the same name again
  f.model.OnOpEvent(Op(EV_OP_EXIT, 7, 1, 0x9000));
  ASSERT_EQ(f.out.size(), 6u);
  EXPECT_EQ(f.Name(f.out[0]), "autograd::engine::evaluate_function: MmBackward0");
  EXPECT_EQ(f.out[0].hdr.type, EV_OP_ENTER);
  EXPECT_EQ(f.Name(f.out[1]), "aten::mm");
  EXPECT_EQ(f.out[3].op_id, f.out[0].op_id) << "the return closes the renamed slice";
  EXPECT_EQ(f.out[5].op_id, f.out[0].op_id);
  EXPECT_EQ(f.ops[f.out[0].op_id].category, kAutogradNode) << "a range, not an op";
  EXPECT_EQ(f.grew, 1) << "one op table entry per name";
  EXPECT_EQ(f.ops.size(), 4u);
  EXPECT_EQ(f.stats.autograd_nodes_unnamed, 0u);
}

TEST(AutogradModelTest, UnnamedAndPythonNodesAreCountedAndOtherEntriesPassedOn) {
  ModelFixture f;
  f.model.OnNodeEntry(EngineEntry(7, 1, 0x9000, 0));  // vtable unreadable
  f.model.OnOpEvent(Op(EV_OP_UNWIND, 7, 0, 0x9100));              // an exception ended it
  f.model.OnNodeEntry(EngineEntry(7, 1, 0x9000, 0x200));
  f.model.OnOpEvent(Op(EV_OP_EXIT, 7, 1, 0x9000));
  ASSERT_EQ(f.out.size(), 4u);
  EXPECT_EQ(f.Name(f.out[0]), kUnnamedNode);
  EXPECT_EQ(f.out[1].hdr.type, EV_OP_UNWIND);
  EXPECT_EQ(f.Name(f.out[2]), "autograd::engine::evaluate_function: torch::autograd::PyNode");
  EXPECT_EQ(f.out[3].op_id, f.out[2].op_id);
  EXPECT_EQ(f.stats.autograd_nodes_unnamed, 1u);
  EXPECT_EQ(f.stats.autograd_python_nodes, 1u);
}

// A Python Function's node: both ranges named after its Python class, as
// the profiler names them; the apply's own return closes the inner one.
TEST(AutogradModelTest, PythonFunctionNodesAreNamedAfterTheirClass) {
  ModelFixture f;
  tp_autograd_node_event entry = EngineEntry(7, 1, 0x9000, 0x200);
  entry.py_type = 0x300;  // Py_TYPE of its Python object
  f.model.OnNodeEntry(entry);
  f.model.OnOpEvent(Op(EV_OP_ENTER, 7, 2, 0x8800));  // PyNode::apply
  f.model.OnOpEvent(Op(EV_OP_ENTER, 7, 0, 0x8000));  // an op of its backward
  f.model.OnOpEvent(Op(EV_OP_EXIT, 7, 0, 0x8000));
  f.model.OnOpEvent(Op(EV_OP_EXIT, 7, 2, 0x8800));
  f.model.OnOpEvent(Op(EV_OP_EXIT, 7, 1, 0x9000));
  ASSERT_EQ(f.out.size(), 6u);
  EXPECT_EQ(f.Name(f.out[0]), "autograd::engine::evaluate_function: DoubleBackward");
  EXPECT_EQ(f.Name(f.out[1]), "DoubleBackward");
  EXPECT_EQ(f.ops[f.out[1].op_id].category, kAutogradNode);
  EXPECT_EQ(f.Name(f.out[2]), "aten::mm");
  EXPECT_EQ(f.out[4].op_id, f.out[1].op_id) << "the apply's return closes the inner range";
  EXPECT_EQ(f.out[5].op_id, f.out[0].op_id);
  EXPECT_EQ(f.stats.autograd_python_nodes, 0u) << "named: not counted";
  // An apply with no engine call of a PyNode open (attached mid-backward)
  // keeps its probe's name.
  f.model.OnOpEvent(Op(EV_OP_ENTER, 8, 2, 0x8800));
  EXPECT_EQ(f.Name(f.out.back()), kPyNodeClass);
}

// A Python class's name that could not be read once is read again at its
// next node: one failed read does not leave the class unnamed for the run.
TEST(AutogradModelTest, AnUnreadPythonNameIsTriedAgain) {
  OpTable ops{{"aten::mm", "", ""}, {std::string(kUnnamedNode), "", ""},
              {std::string(kPyNodeClass), "", "", kAutogradNode}};
  TraceStats stats;
  std::vector<tp_op_event> out;
  int reads = 0;
  AutogradModel model{&ops,
                      [](uint32_t, uint64_t) -> std::string { return "vtable for torch::autograd::PyNode"; },
                      [&reads](uint32_t, uint64_t) -> std::optional<std::string> {
                        if (++reads == 1) return std::nullopt;  // the first read fails
                        return "ScaleBackward";
                      },
                      [] {}};
  model.SetOutput([&out](const tp_op_event& e) { out.push_back(e); }, &stats);
  for (uint64_t node : {0x9000, 0x9100, 0x9200}) {
    tp_autograd_node_event entry = EngineEntry(7, 1, node, 0x200);
    entry.py_type = 0x300;
    model.OnNodeEntry(entry);
    model.OnOpEvent(Op(EV_OP_EXIT, 7, 1, node));
  }
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(ops[out[0].op_id].name, "autograd::engine::evaluate_function: torch::autograd::PyNode");
  EXPECT_EQ(ops[out[2].op_id].name, "autograd::engine::evaluate_function: ScaleBackward");
  EXPECT_EQ(ops[out[4].op_id].name, "autograd::engine::evaluate_function: ScaleBackward");
  EXPECT_EQ(stats.autograd_python_nodes, 1u);
  EXPECT_EQ(reads, 2) << "a name read is kept";
}

// Where PyNode keeps its Python object, from PyNode::name()'s code in each
// libtorch_python (Debian's 1.13: 0x188; trixie's 2.6: 0x1d8), and the
// shape of code that is refused.
TEST(AutogradProbesTest, PyNodeObjectOffsetFromItsNameFunction) {
  // mov 0x188(%rbp),%rax; mov 0x8(%rax),%rax; mov 0x18(%rax),%r14
  std::string code = "\x48\x8b\x85\x88\x01\x00\x00\x48\x8b\x40\x08\x4c\x8b\x70\x18"s;
  EXPECT_EQ(PyNodeObjectOffset(code), 0x188u);
  std::string other_base = code;
  other_base[9] = '\x41';  // mov 0x8(%rcx): not the register just loaded
  EXPECT_EQ(PyNodeObjectOffset(other_base), std::nullopt);
  EXPECT_EQ(PyNodeObjectOffset(code.substr(0, 11)), std::nullopt);
  size_t found = 0;
  for (const std::string& lib : test::LibtorchImages()) {
    std::string python = LibtorchPythonBeside(lib);
    ASSERT_FALSE(python.empty()) << lib;
    StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(python);
    ASSERT_TRUE(image.ok()) << image.status().message();
    std::optional<uint32_t> offset = FindPyNodeObjectOffset(**image);
    ASSERT_TRUE(offset) << python;
    EXPECT_TRUE(*offset == 0x188 || *offset == 0x1d8) << python << ": " << *offset;
    StatusOr<OpProbeSet> set = FindOpProbes(lib);
    ASSERT_TRUE(set.ok());
    for (const OpProbe& probe : set->probes)
      if (probe.collective_layout == kAutogradNodeEntry) {
        EXPECT_EQ(probe.node_object_offset, *offset) << lib;
      }
    StatusOr<OpProbeSet> applies = FindPyNodeProbes(python);
    ASSERT_TRUE(applies.ok());
    ASSERT_EQ(applies->probes.size(), 1u) << python;
    EXPECT_EQ(applies->probes[0].op.name, kPyNodeClass);
    ++found;
  }
  if (found == 0) GTEST_SKIP() << "no libtorch_cpu 1.13 or 2.6 here";
}

TEST(AutogradProbesTest, EngineAndNodesFoundInLibtorch) {
  std::vector<std::string> libs = test::LibtorchImages();
  if (libs.empty()) GTEST_SKIP() << "no libtorch_cpu 1.13 or 2.6 here";
  for (const std::string& lib : libs) {
    StatusOr<OpProbeSet> set = FindOpProbes(lib);
    ASSERT_TRUE(set.ok()) << set.status().message();
    std::map<std::string, const OpProbe*> by_name;
    size_t engines = 0;
    for (const OpProbe& probe : set->probes) {
      by_name[probe.op.name] = &probe;
      engines += probe.collective_layout == kAutogradNodeEntry;
    }
    EXPECT_EQ(engines, 1u) << lib;
    ASSERT_TRUE(by_name.count(std::string(kUnnamedNode))) << lib;
    EXPECT_EQ(by_name[std::string(kUnnamedNode)]->collective_layout, kAutogradNodeEntry);
    for (const char* node : {"AddmmBackward0", "MmBackward0", "torch::autograd::AccumulateGrad",
                             "torch::autograd::CopySlices"}) {
      ASSERT_TRUE(by_name.count(node)) << lib << ": " << node;
      EXPECT_FALSE(by_name[node]->return_offsets.empty()) << lib << ": " << node;
      EXPECT_EQ(by_name[node]->collective_layout, 0u);
      EXPECT_EQ(by_name[node]->op.category, kAutogradNode);
    }
  }
}

// ---- Tier 2: real PyTorch ----

using Counts = std::map<std::string, double>;
constexpr const char* kPerBackward = "autograd::engine::evaluate_function: MeanBackward0";  // once each

std::string Fixture() { return test::Fixture("autograd_nodes.py"); }
bool IsEngineRange(const std::string& name) { return name.starts_with(kEvaluateFunctionPrefix); }

// Divides `counts` by the backwards they hold; returns how many.
double PerBackward(Counts& counts) {
  double backwards = counts[std::string(kPerBackward) + " <- -"];
  for (auto& [key, n] : counts) n /= std::max(backwards, 1.0);
  return backwards;
}

// "NAME <- PARENT" per backward, from what autograd_nodes.py --profile wrote.
Counts ProfiledPerBackward(const std::string& text) {
  Counts counts;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells = test::SplitTabs(line);
    if (cells.size() == 3 && cells[0] == "parent") counts[cells[1] + " <- " + cells[2]] += 1;
  }
  PerBackward(counts);
  return counts;
}

// The same from a trace: every slice in or under an engine range, whole
// engine ranges only (those cut by the trace's edges are left out); the
// number of backwards in `backwards`.
Counts TracedPerBackward(const DecodedTrace& trace, double* backwards) {
  Counts counts;
  for (const DecodedThread& t : trace.threads) {
    std::vector<int8_t> inside(t.slices.size(), 0);  // 1 in a whole range, -1 in a cut one
    for (size_t i = 0; i < t.slices.size(); ++i) {
      const DecodedSlice& s = t.slices[i];
      const std::string& name = trace.ops[s.op].name;
      if (IsEngineRange(name)) inside[i] = s.repaired_begin || s.repaired_end ? -1 : 1;
      else if (s.parent >= 0) inside[i] = inside[s.parent];
      if (inside[i] != 1) continue;
      counts[name + " <- " + (s.parent >= 0 ? trace.ops[t.slices[s.parent].op].name : "-")] += 1;
    }
  }
  *backwards = PerBackward(counts);
  return counts;
}

// Done-when 3: the backward ops' parents are the profiler's autograd ranges.
void ExpectBackwardMatches(const std::string& path, const Counts& profiled, const std::string& what) {
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(path, &trace, &error)) << error;
  // CPU work: the engine runs on the thread that called backward(), the
  // script's main thread, where the profiler puts these ranges too.
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices)
      if (IsEngineRange(trace.ops[s.op].name)) {
        ASSERT_EQ(t.tid, t.pid) << what << ": " << trace.ops[s.op].name;
      }
  double backwards = 0;
  Counts traced = TracedPerBackward(trace, &backwards);
  ASSERT_GE(backwards, 20) << what << ": too few backwards traced";
  double recall = test::CountAgreement(traced, profiled), precision = test::CountAgreement(profiled, traced);
  EXPECT_GE(recall, 0.99) << what << "\n" << test::CountDisagreements(traced, profiled);
  EXPECT_GE(precision, 0.99) << what << "\n" << test::CountDisagreements(traced, profiled);
  EXPECT_EQ(trace.stats.autograd_nodes_unnamed, 0u);
  std::printf("[ parity ] %s: %.0f backwards, parents recall %.4f precision %.4f\n", what.c_str(),
              backwards, recall, precision);
}

class AutogradTest : public test::ScratchTest {
 protected:
  // Records `target` (its python's pid in `ready_file`) for a second.
  test::CommandResult RecordWhenReady(pid_t target, const std::string& ready_file, const std::string& out) {
    spawned_.push_back(target);
    if (!test::WaitForFile(ready_file, 120)) return {-1, "", "the script never got ready"};
    // The pid is written once the file exists: wait for it to be whole.
    test::WaitUntil([&] { return !test::ReadFile(ready_file).empty(); }, 30);
    return test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--pid", test::ReadFile(ready_file),
                             "--duration", "1", "-o", out});
  }
};

TEST_F(AutogradTest, AttachedBackwardMatchesTorchProfiler) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string ready = dir_ + "/ready", out = dir_ + "/attached.pftrace", profile = dir_ + "/profile.txt";
  pid_t target = test::Spawn({test::Python(), Fixture(), "--iterations", "0", "--ready-file", ready}, "/dev/null");
  test::CommandResult r = RecordWhenReady(target, ready, out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(test::RunCommand({test::Python(), Fixture(), "--iterations", "20", "--profile", profile}).exit_code, 0);
  ExpectBackwardMatches(out, ProfiledPerBackward(test::ReadFile(profile)), "1.13");
}

TEST_F(AutogradTest, AttachedBackwardMatchesTorchProfilerOnPyTorch2) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  // Unique names in the root: other sessions' tests run there too.
  std::string name = "/tmp/torchprobe-autograd-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", Fixture(), root + name + ".py"}).exit_code, 0);
  std::string out = dir_ + "/attached26.pftrace";
  pid_t target = test::Spawn(
      test::Torch2Python(root, name + ".py", {"--iterations", "0", "--ready-file", name + ".ready"}), "/dev/null");
  test::CommandResult r = RecordWhenReady(target, root + name + ".ready", out);
  test::CommandResult p =
      test::RunCommand(test::Torch2Python(root, name + ".py", {"--iterations", "20", "--profile", name + ".txt"}));
  std::string profile = test::ReadFile(root + name + ".txt");
  for (const char* suffix : {".py", ".ready", ".txt"}) unlink((root + name + suffix).c_str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(p.exit_code, 0) << p.err;
  ExpectBackwardMatches(out, ProfiledPerBackward(profile), "2.6");
}

// A custom Function's backward raises: the exception goes out through the
// engine's evaluate_function (probed) to its catch. The program's result is
// unchanged, and every engine range is closed (unwound at the catch), none
// left open or repaired.
TEST_F(AutogradTest, BackwardThatThrowsLeavesNoOpenRange) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/throw.pftrace";
  test::CommandResult r = test::RunCommand(
      {test::TorchprobeBinary(), "record", "-q", "-o", out, "--", test::Python(), Fixture(), "--throw", "20"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("caught 20"), std::string::npos) << r.out;
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  size_t python_nodes = 0, unwound = 0, engine = 0;
  for (const DecodedThread& t : trace.threads) {
    for (const DecodedSlice& s : t.slices) {
      const std::string& name = trace.ops[s.op].name;
      if (!IsEngineRange(name)) continue;
      ++engine;
      EXPECT_TRUE(s.ended) << name;
      EXPECT_FALSE(s.repaired_end) << name;
      EXPECT_FALSE(s.repaired_begin) << name;
      // Named after its Python class, as the profiler names it.
      if (name.ends_with("BadBackwardBackward")) {
        ++python_nodes;
        unwound += s.unwound;
      }
    }
  }
  EXPECT_EQ(python_nodes, 20u) << "one throwing node per backward";
  EXPECT_EQ(unwound, 20u) << "each ended by its exception, at the engine's catch";
  EXPECT_GE(engine, 20u + 20u + 1u) << "and the nodes after them";
  EXPECT_EQ(trace.stats.end_repaired, 0u);
  EXPECT_EQ(trace.stats.autograd_python_nodes, 0u) << "every Python node named";
}

}  // namespace
}  // namespace torchprobe
