// Every way an op is called, traced from outside, against torch.profiler in
// the same script (tests/fixtures/dispatch_paths.py): the at::_ops route
// (a training loop), the boxed route (torch.ops.aten.*, a __torch_dispatch__
// subclass, TorchScript, torch.compile's aot_eager graphs with a graph
// break), on Debian's PyTorch 1.13 and on 2.6 in the trixie root, launched
// through unshare, sh and chroot into the root's dynamic loader, and
// attached by pid. Per op name, counts over the measured iterations must
// agree (recall and precision >= 99%), and on 2.6 so must each op's nearest
// op parent. 1.13's profiler rebuilds its tree from whole-microsecond
// intervals and misplaces short ops, so parents are compared on 2.6 only.
#include <signal.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"

namespace torchprobe {
namespace {

constexpr const char* kIters = "5";
constexpr const char* kMarker = "aten::eye";  // begins every measured iteration

struct OpCounts {
  std::map<std::string, size_t> ops;                                 // by name
  std::map<std::pair<std::string, std::string>, size_t> parents;    // (name, nearest op parent)
  size_t total() const {
    size_t n = 0;
    for (const auto& [name, count] : ops) n += count;
    return n;
  }
};

OpCounts ReadProfile(const std::string& path) {
  OpCounts counts;
  std::ifstream in(path);
  std::string kind, name, parent;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    words >> kind >> name;
    if (kind == "op") ++counts.ops[name];
    if (kind == "parent" && (words >> parent)) ++counts.parents[{name, parent}];
  }
  return counts;
}

// What the profiler calls an op, not an annotation ("autograd::engine::...").
bool IsOpName(const std::string& name) {
  size_t sep = name.find("::");
  return sep != std::string::npos && sep > 0 && name.find("::", sep + 2) == std::string::npos &&
         name.find(' ') == std::string::npos;
}

// The trace's ops from the first top-level marker on. Parents after the
// profiler's EventList._remove_dup_nodes rule, which events() applies: a
// child that is its parent's only child and has its name is folded into it.
OpCounts ReadTrace(const std::string& trace) {
  struct Node {
    int64_t parent;
    std::string name;
    int64_t ts;
    std::vector<int64_t> children;
  };
  std::map<int64_t, Node> nodes;
  for (const auto& row : test::QueryTrace(trace, "select id, coalesce(parent_id, -1), name, ts from slice"))
    if (row.size() == 4) nodes[std::stoll(row[0])] = Node{std::stoll(row[1]), row[2], std::stoll(row[3]), {}};
  // Annotations and ProfilerStep# slices are not ops: an op's parent is its
  // nearest op ancestor, as in the profiler's op-only comparison.
  for (auto& [id, node] : nodes)
    while (nodes.count(node.parent) && !IsOpName(nodes[node.parent].name)) node.parent = nodes[node.parent].parent;
  for (auto it = nodes.begin(); it != nodes.end();) it = IsOpName(it->second.name) ? std::next(it) : nodes.erase(it);
  int64_t start = INT64_MAX;
  for (auto& [id, node] : nodes) {
    if (nodes.count(node.parent)) nodes[node.parent].children.push_back(id);
    if (node.name == kMarker && node.parent < 0) start = std::min(start, node.ts);
  }
  OpCounts counts;
  for (const auto& [id, node] : nodes)
    if (node.ts >= start && IsOpName(node.name)) ++counts.ops[node.name];
  for (bool folded = true; folded;) {
    folded = false;
    for (auto it = nodes.begin(); it != nodes.end();) {
      auto parent = nodes.find(it->second.parent);
      if (parent == nodes.end() || parent->second.name != it->second.name ||
          parent->second.children.size() != 1) {
        ++it;
        continue;
      }
      parent->second.children = it->second.children;
      for (int64_t child : it->second.children) nodes[child].parent = parent->first;
      it = nodes.erase(it);
      folded = true;
    }
  }
  for (const auto& [id, node] : nodes) {
    if (node.ts < start || !IsOpName(node.name)) continue;
    auto parent = nodes.find(node.parent);
    ++counts.parents[{node.name, parent == nodes.end() ? "-" : parent->second.name}];
  }
  return counts;
}

template <class Key>
std::pair<double, double> RecallPrecision(const std::map<Key, size_t>& traced,
                                          const std::map<Key, size_t>& profiled, std::string* diff) {
  size_t matched = 0, traced_total = 0, profiled_total = 0;
  std::map<Key, std::pair<size_t, size_t>> both;
  for (const auto& [k, n] : traced) both[k].first = n;
  for (const auto& [k, n] : profiled) both[k].second = n;
  for (const auto& [k, n] : both) {
    matched += std::min(n.first, n.second);
    traced_total += n.first;
    profiled_total += n.second;
    if (n.first == n.second) continue;
    std::ostringstream line;
    if constexpr (std::is_same_v<Key, std::string>) line << "  " << k;
    else line << "  " << k.first << " in " << k.second;
    line << ": torchprobe " << n.first << ", torch.profiler " << n.second << "\n";
    *diff += line.str();
  }
  return {profiled_total ? double(matched) / profiled_total : 0, traced_total ? double(matched) / traced_total : 0};
}

void ExpectParity(const OpCounts& traced, const OpCounts& profiled, bool parents, const std::string& what) {
  ASSERT_GT(profiled.total(), 0u) << what << ": the profiler recorded nothing";
  std::string diff;
  auto [recall, precision] = RecallPrecision(traced.ops, profiled.ops, &diff);
  EXPECT_GE(recall, 0.99) << what << " ops\n" << diff;
  EXPECT_GE(precision, 0.99) << what << " ops\n" << diff;
  std::printf("  %s: %zu ops (%s iterations), recall %.4f precision %.4f", what.c_str(), traced.total(),
              kIters, recall, precision);
  if (parents) {
    std::string parent_diff;
    auto [p_recall, p_precision] = RecallPrecision(traced.parents, profiled.parents, &parent_diff);
    EXPECT_GE(p_recall, 0.99) << what << " parents\n" << parent_diff;
    EXPECT_GE(p_precision, 0.99) << what << " parents\n" << parent_diff;
    std::printf(", parents recall %.4f precision %.4f", p_recall, p_precision);
  }
  std::printf("\n");
}

class DispatchParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    if (test::TraceProcessor().empty()) GTEST_SKIP() << "needs ../shared/tools/trace_processor_shell";
    dir_ = test::MakeTempDir();
    script_ = test::TrainScript();
    script_.replace(script_.rfind("train.py"), 8, "dispatch_paths.py");
  }
  void TearDown() override {
    if (!in_root_.empty()) unlink(in_root_.c_str());
    if (!dir_.empty()) test::RunCommand({"rm", "-rf", dir_});
  }
  // The script inside the 2.x root, under a name of this test's own.
  std::string RootScript(const std::string& root) {
    std::string name = "/tmp/torchprobe-dispatch-" + std::to_string(getpid()) + ".py";
    in_root_ = root + name;
    EXPECT_EQ(test::RunCommand({"cp", script_, in_root_}).exit_code, 0);
    return name;
  }
  // Profiles `python` (argv up to the script) running CASE under torch.profiler.
  OpCounts Profile(std::vector<std::string> python, const std::string& c, const std::string& out_host,
                   const std::string& out_arg) {
    python.insert(python.end(), {c, "--iters", kIters, "--profile", out_arg});
    test::CommandResult r = test::RunCommand(python);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ReadProfile(out_host);
  }
  OpCounts Launch(std::vector<std::string> python, const std::string& c) {
    std::string trace = dir_ + "/" + c + ".pftrace";
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "-o", trace, "--"};
    argv.insert(argv.end(), python.begin(), python.end());
    argv.insert(argv.end(), {c, "--iters", kIters});
    test::CommandResult r = test::RunCommand(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ReadTrace(trace);
  }
  void HostCase(const std::string& c) {
    if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch";
    std::string profile = dir_ + "/" + c + ".profile";
    OpCounts profiled = Profile({test::Python(), script_}, c, profile, profile);
    ExpectParity(Launch({test::Python(), script_}, c), profiled, false, "1.13 " + c);
  }
  void RootCase(const std::string& c) {
    std::string root = test::Torch2Root();
    if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
    std::string script = RootScript(root);
    std::vector<std::string> python = test::Torch2Python(root, script, {});
    std::string profile = "/tmp/torchprobe-dispatch-" + std::to_string(getpid()) + ".profile";
    OpCounts profiled = Profile(python, c, root + profile, profile);
    unlink((root + profile).c_str());
    ExpectParity(Launch(python, c), profiled, true, "2.6 " + c);
  }

  std::string dir_, script_, in_root_;
};

TEST_F(DispatchParityTest, TorchScriptOn113) { HostCase("script"); }
TEST_F(DispatchParityTest, TorchOpsOn113) { HostCase("torchops"); }
TEST_F(DispatchParityTest, TorchDispatchSubclassOn113) { HostCase("subclass"); }
TEST_F(DispatchParityTest, TrainingLoopLaunchedThroughChrootOn26) { RootCase("train"); }
TEST_F(DispatchParityTest, CompiledWithAGraphBreakOn26) { RootCase("compiled"); }
TEST_F(DispatchParityTest, TorchDispatchSubclassOn26) { RootCase("subclass"); }
TEST_F(DispatchParityTest, TorchOpsOn26) { RootCase("torchops"); }
TEST_F(DispatchParityTest, TorchScriptOn26) { RootCase("script"); }

TEST_F(DispatchParityTest, TrainingLoopAttachedByPidOn26) {
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  std::string script = RootScript(root);
  std::string tag = "/tmp/torchprobe-dispatch-" + std::to_string(getpid());
  std::vector<std::string> python = test::Torch2Python(root, script, {});
  std::string profile = tag + ".profile";
  OpCounts profiled = Profile(python, "train", root + profile, profile);
  unlink((root + profile).c_str());

  std::string ready = tag + ".ready", go = tag + ".go", trace = dir_ + "/pid.pftrace";
  pid_t target = test::Spawn(test::Torch2Python(root, script, {"train", "--iters", kIters, "--ready", ready, "--go", go}),
                             "/dev/null");
  ASSERT_TRUE(test::WaitForFile(root + ready, 120)) << "the script never got ready";
  pid_t python_pid = static_cast<pid_t>(std::stol(test::ReadFile(root + ready)));
  // torchprobe stops itself once the process is traced (a test hook); the
  // measured iterations begin only then.
  pid_t tracer = test::Spawn({"env", "TORCHPROBE_TEST_PAUSE=recording", test::TorchprobeBinary(), "record",
                              "-q", "--pid", std::to_string(python_pid), "-o", trace},
                             "/dev/null");
  bool live = false;
  for (int i = 0; i < 2400 && !(live = ReadProcessState(static_cast<uint32_t>(tracer)) == 'T'); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::ofstream(root + go) << "go";
  kill(tracer, SIGCONT);
  EXPECT_TRUE(live) << "torchprobe never attached";
  EXPECT_EQ(test::Wait(target), 0);
  EXPECT_EQ(test::Wait(tracer), 0);
  unlink((root + ready).c_str());
  unlink((root + go).c_str());
  ExpectParity(ReadTrace(trace), profiled, true, "2.6 train by pid");
}

}  // namespace
}  // namespace torchprobe
