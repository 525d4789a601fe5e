// Issue 28, 1 and 2: what kind of memory each allocation is (--memory
// --shapes), against the memory profiler's own test cases (seed 004), run
// by memory_categories.py on 1.13 and in the 2.x root: at each case's
// marker, the bytes of each category are the bytes of the tensors the seed
// asserts to be of it. And the timeline's rows: in-place writes as
// INCREMENT_VERSION, frees of the last version, and the seed's
// test_memory_timeline_no_id rows.
#include <unistd.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/report/category_summary.h"
#include "userspace/report/json_value.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

struct Case {
  std::string name;
  std::map<std::string, int64_t> expected;  // category -> bytes
};

std::vector<Case> ParseCases(const std::string& out) {
  std::vector<Case> cases;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string word;
    if (!(words >> word) || word != "case") continue;
    Case c;
    words >> c.name;
    while (words >> word) {
      size_t eq = word.find('=');
      c.expected[word.substr(0, eq)] = std::stoll(word.substr(eq + 1));
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

class MemoryCategoriesTest : public test::ScratchTest {
 protected:
  // Records `prefix + [script]` with --memory --shapes and checks each
  // case's categories at its marker, and the timeline.
  void RecordAndCheck(const std::vector<std::string>& prefix, const std::string& script) {
    std::string out = dir_ + "/c.pftrace", timeline = dir_ + "/c.json";
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "--memory", "--shapes",
                                     "--memory-timeline", timeline, "-o", out, "--"};
    argv.insert(argv.end(), prefix.begin(), prefix.end());
    argv.push_back(script);
    test::CommandResult r = test::RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<Case> cases = ParseCases(r.out);
    ASSERT_EQ(cases.size(), 8u) << r.out;
    DecodedTrace trace;
    std::string error;
    ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
    ASSERT_FALSE(trace.memory_categories.empty()) << "no category track";
    std::vector<std::pair<uint64_t, uint32_t>> markers;  // (begin, pid)
    for (const DecodedThread& t : trace.threads)
      for (const DecodedSlice& s : t.slices)
        if (trace.ops[s.op].name == "aten::sign_") markers.emplace_back(s.begin_ns, t.pid);
    std::sort(markers.begin(), markers.end());
    ASSERT_EQ(markers.size(), cases.size());
    for (size_t k = 0; k < cases.size(); ++k) {
      std::map<std::string, int64_t> got;
      for (const CategoryBytes& c : CategoriesAt(trace, markers[k].second, "CPU", markers[k].first))
        got[c.category] = c.bytes;
      std::string all;
      for (const auto& [category, bytes] : got) all += " " + category + "=" + std::to_string(bytes);
      for (const auto& [category, bytes] : cases[k].expected)
        EXPECT_EQ(got[category], bytes) << cases[k].name << " " << category << "; all:" << all;
    }
    CheckTimeline(test::ReadFile(timeline));
    if (!test::TraceProcessor().empty()) {
      auto bad = test::QueryTrace(out, "select name, value from stats where value > 0 and severity != 'info'");
      EXPECT_TRUE(bad.empty()) << bad.front().front();
    }
    test::CommandResult report = test::RunCommand({test::TorchprobeBinary(), "report", out});
    ASSERT_EQ(report.exit_code, 0) << report.err;
    EXPECT_NE(report.out.find("at the peak, by category: "), std::string::npos) << report.out;
  }

  // In-place writes are INCREMENT_VERSION rows (the optimizers' add_), each
  // from the version before it, and a free is of the last version.
  void CheckTimeline(const std::string& text) {
    JsonValue rows;
    std::string error;
    ASSERT_TRUE(ParseJson(text, &rows, &error)) << error;
    std::map<uint64_t, uint32_t> version;
    size_t bumps = 0, destroys_after_bumps = 0;
    for (const JsonValue& row : rows.items) {
      ASSERT_EQ(row.items.size(), 4u);
      int action = static_cast<int>(row.items[1].number);
      uint64_t id = static_cast<uint64_t>(row.items[2].items[0].number);
      uint32_t v = static_cast<uint32_t>(row.items[2].items[1].number);
      if (action == 3) {
        EXPECT_EQ(v, version[id]) << "id " << id;
        version[id] = v + 1;
        ++bumps;
      } else if (action == 4) {
        EXPECT_EQ(v, version[id]) << "id " << id;
        destroys_after_bumps += v > 0;
      }
    }
    EXPECT_GT(bumps, 20u) << "three cases' optimizer steps write their parameters in place";
    EXPECT_GT(destroys_after_bumps, 0u);
    // test_memory_timeline_no_id's rows, in a row (the last of the run's 1024-byte allocations).
    std::vector<std::pair<int, uint64_t>> actions;
    for (const JsonValue& row : rows.items)
      actions.emplace_back(static_cast<int>(row.items[1].number), static_cast<uint64_t>(row.items[3].number));
    std::vector<std::pair<int, uint64_t>> want = {{2, 256}, {4, 256}, {2, 1024}, {4, 1024}};
    EXPECT_NE(std::search(actions.begin(), actions.end(), want.begin(), want.end()), actions.end());
  }
};

TEST_F(MemoryCategoriesTest, SeedCasesOnPyTorch1) {
  TP_REQUIRE_ROOT_AND_TORCH();
  RecordAndCheck({test::Python()}, test::Fixture("memory_categories.py"));
}

TEST_F(MemoryCategoriesTest, SeedCasesOnPyTorch2) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  std::string there = "/tmp/torchprobe-categories-" + std::to_string(getpid()) + ".py";
  ASSERT_EQ(test::RunCommand({"cp", test::Fixture("memory_categories.py"), root + there}).exit_code, 0);
  RecordAndCheck({"unshare", "-m", "sh", "-c",
                  "mount -t proc proc \"$0/proc\" && shift && exec chroot \"$0\" python3 \"$@\"", root, root},
                 there);
  unlink((root + there).c_str());
}

}  // namespace
}  // namespace torchprobe
