// --et / --chrome: the execution trace and Kineto-style JSON writers.
//  - on a synthetic model (no root): both files decoded by Python's json
//    (tests/fixtures/json_facts.py) and checked for meaning: node nesting and
//    ids, rf_id == Record function id per slice, categories, times, rank, stats;
//  - recording real PyTorch (1.13 on the host, 2.6 in the trixie root): the
//    pair passes the consumers in ../shared/validators, and matches PyTorch's
//    own observer for the same script (tests/fixtures/et_compare.py);
//  - a bad path for any output is one line before anything is attached.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/export/chrome_trace_writer.h"
#include "userspace/export/execution_trace_writer.h"
#include "userspace/export/json_text.h"
#include "userspace/report/json_value.h"

namespace torchprobe {
namespace {

using test::Fixture;
using test::JsonFacts;
using test::Measures;  // `key value` lines (et_compare.py) by key

constexpr uint64_t kMono = 7'000'000'000'000;

OpTable Ops() {
  return {{"aten::linear", "", "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"},
          {"aten::addmm", "", "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"},
          {"## LOOP 0 ##", "", ""},  // a record_function annotation, once the model has them
          {"aten::\"odd\"\xff", "", ""},  // quotes and a byte that is not UTF-8
          {"autograd::engine::evaluate_function: MmBackward0", "", ""}};
}

Slice S(uint64_t begin, uint64_t end, uint32_t op, uint16_t depth) {
  return Slice{kMono + begin, kMono + end, op, depth, 0, 0};
}

// Feeds the same synthetic model to a writer: pid 10 with threads 10 and 11,
// an annotation enclosing linear > addmm, a sibling after it, another thread.
void Feed(TraceSink& sink) {
  sink.Begin(Ops(), ClockSnapshot{1, kMono});
  ProcessInfo p;
  p.pid = 10;
  p.name = "python3 train.py";
  p.rank = 3;
  sink.AddProcess(p);
  sink.AddThread({10, 10, "python3"});
  sink.AddSliceTree(10, 10, {S(0, 1000, 2, 0), S(10, 900, 0, 1), S(20, 800, 1, 2), S(905, 990, 3, 1)});
  sink.AddThread({10, 11, "pt_autograd_0"});
  sink.AddSliceTree(10, 11, {S(100, 200, 4, 0)});
  sink.AddSliceTree(10, 10, {S(2000, 2500, 1, 0)});
  TraceStats stats;
  stats.events = 12;
  stats.begin_repaired = 2;
  std::string error;
  EXPECT_TRUE(sink.Finish(stats, &error)) << error;
}

// What JsonText writes, the report's JSON reader reads back the same.
// The README's first command installs what the consumer checks import, so
// they run on a fresh machine instead of skipping: every package the
// validator's --install-deps would install is in tools/install-deps.
TEST(InstallDepsTest, InstallsTheValidatorsPackages) {
  std::ifstream validator(test::RepoPath("../shared/validators/check-et-kineto"));
  if (!validator) GTEST_SKIP() << "no ../shared/validators beside the repository";
  std::stringstream text;
  text << validator.rdbuf();
  std::string source = text.str();
  size_t list = source.find("APT_PACKAGES = [");
  ASSERT_NE(list, std::string::npos) << "check-et-kineto names its packages elsewhere now";
  std::string packages = source.substr(list, source.find(']', list) - list);
  std::ifstream install(test::RepoPath("tools/install-deps"));
  std::stringstream ours;
  ours << install.rdbuf();
  size_t count = 0;
  for (size_t q = packages.find('"'); q != std::string::npos; q = packages.find('"', q + 1)) {
    size_t end = packages.find('"', q + 1);
    std::string name = packages.substr(q + 1, end - q - 1);
    q = end;
    ++count;
    // A word of its own (python3-yaml is not python3-yaml-env).
    bool listed = false;
    for (size_t at = ours.str().find(" " + name); at != std::string::npos && !listed;
         at = ours.str().find(" " + name, at + 1)) {
      size_t after = at + 1 + name.size();
      listed = after == ours.str().size() || std::isspace(static_cast<unsigned char>(ours.str()[after]));
    }
    EXPECT_TRUE(listed) << name << " is not in tools/install-deps";
  }
  EXPECT_GT(count, 0u);
}

TEST(JsonTextTest, StringsAndNumbersRoundTripThroughTheReader) {
  const std::string strings[] = {"aten::mm", "q\"uote\\back", "tab\tnl\n\x01", "\xc3\xa9t\xc3\xa9 \xf0\x9f\x94\xa5", ""};
  JsonText text;
  text.Raw("{").Key("s").Raw("[");
  for (const std::string& s : strings) text.String(s).Raw(",");
  text.String("bad \xff\xc3").Raw("], ").Key("n").Raw("[").UInt(18446744073709551615ull).Raw(",").Int(-7);
  text.Raw(",").Micros(1234567).Raw("]}");
  JsonValue root;
  std::string error;
  ASSERT_TRUE(ParseJson(text.str(), &root, &error)) << error << "\n" << text.str();
  const JsonValue* s = root.Find("s");
  ASSERT_TRUE(s && s->items.size() == 6);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(s->items[i].string, strings[i]);
  EXPECT_EQ(s->items[5].string, "bad \xef\xbf\xbd\xef\xbf\xbd") << "bytes that are not UTF-8 become U+FFFD";
  const JsonValue* n = root.Find("n");
  ASSERT_TRUE(n && n->items.size() == 3);
  EXPECT_EQ(n->items[1].integer, -7);
  EXPECT_DOUBLE_EQ(n->items[2].number, 1234.567);
  for (const char* bad : {"{\"a\": [1, 2}", "{\"a\": \"x}", "[1] 2", "{\"a\" 1}", "tru"})
    EXPECT_FALSE(ParseJson(bad, &root, &error)) << bad;
  EXPECT_NE(error.find("at byte"), std::string::npos) << error;
}

TEST(ExecutionTraceWriterTest, NodesNestLikeTheModelAndCarryEveryAttr) {
  std::string path = test::MakeTempDir() + "/t.et.json";
  std::string error;
  std::unique_ptr<ExecutionTraceWriter> writer = ExecutionTraceWriter::Open(path, &error);
  ASSERT_TRUE(writer) << error;
  Feed(*writer);
  std::map<uint64_t, std::vector<std::string>> nodes;  // by id
  std::vector<uint64_t> order;
  std::map<std::string, std::string> stats;
  std::string schema, pid;
  for (const auto& row : JsonFacts("et", path)) {
    if (row[0] == "schema") schema = row[1];
    if (row[0] == "pid") pid = row[1];
    if (row[0] == "stat") stats[row[1]] = row[2];
    if (row[0] != "node") continue;
    uint64_t id = std::stoull(row[1]);
    EXPECT_FALSE(nodes.count(id)) << "duplicate node id " << id;
    nodes[id] = row;
    order.push_back(id);
  }
  EXPECT_EQ(schema, "1.1.1-chakra.0.0.4");
  EXPECT_EQ(pid, "10");
  EXPECT_EQ(stats["events"], "12");
  EXPECT_EQ(stats["begin_repaired"], "2");
  ASSERT_EQ(nodes.size(), 1u + 2u + 6u);  // process, 2 threads, 6 slices
  ASSERT_EQ(order.back(), 1u) << "the process node comes last";
  EXPECT_EQ(nodes[1][7], ExecutionTraceWriter::kProcessNode);
  // Names to rows; every slice's parent is the slice around it, or its thread.
  auto by_name = [&](const std::string& name, int nth = 0) -> const std::vector<std::string>& {
    for (uint64_t id : order)
      if (nodes[id][7] == name && nth-- == 0) return nodes[id];
    static const std::vector<std::string> none(8, "0");
    ADD_FAILURE() << "no node " << name;
    return none;
  };
  const auto& loop = by_name("## LOOP 0 ##");
  const auto& linear = by_name("aten::linear");
  const auto& addmm = by_name("aten::addmm");
  const auto& odd = by_name("aten::\"odd\"\xef\xbf\xbd");
  const auto& backward = by_name("autograd::engine::evaluate_function: MmBackward0");
  const auto& addmm2 = by_name("aten::addmm", 1);
  std::string main_thread = nodes[std::stoull(loop[2])][1];
  EXPECT_EQ(nodes[std::stoull(loop[2])][7], ExecutionTraceWriter::kThreadNode);
  EXPECT_EQ(nodes[std::stoull(loop[2])][2], "1") << "thread nodes hang from the process node";
  EXPECT_EQ(linear[2], loop[1]);
  EXPECT_EQ(addmm[2], linear[1]);
  EXPECT_EQ(odd[2], loop[1]);
  EXPECT_EQ(addmm2[2], main_thread);
  EXPECT_NE(backward[2], main_thread) << "another thread, another thread node";
  // Scopes: annotation USER_SCOPE, autograd BACKWARD_FUNCTION, ops FUNCTION;
  // small tids 1 and 2; op_schema as in the op table.
  EXPECT_EQ(loop[4], "7");
  EXPECT_EQ(backward[4], "1");
  EXPECT_EQ(addmm[4], "0");
  EXPECT_EQ(loop[5], "1");
  EXPECT_EQ(backward[5], "2");
  EXPECT_EQ(addmm[5], "1");
  EXPECT_EQ(std::stoull(linear[6]), Ops()[0].schema.size());
  // rf_ids: position in arrival order, parents before children; nodes are
  // written when they end (children first).
  EXPECT_EQ(loop[3], "1");
  EXPECT_EQ(linear[3], "2");
  EXPECT_EQ(addmm[3], "3");
  EXPECT_EQ(odd[3], "4");
  EXPECT_EQ(backward[3], "5");
  EXPECT_EQ(addmm2[3], "6");
  auto pos = [&](const std::vector<std::string>& row) {
    return std::find(order.begin(), order.end(), std::stoull(row[1])) - order.begin();
  };
  EXPECT_LT(pos(addmm), pos(linear));
  EXPECT_LT(pos(linear), pos(loop));
  EXPECT_LT(std::stoull(loop[1]), std::stoull(addmm[1])) << "ids are handed out at entry";
}

TEST(ChromeTraceWriterTest, EventsCarryTheEtRfIdsTimesAndRank) {
  std::string path = test::MakeTempDir() + "/t.json";
  std::string error;
  std::unique_ptr<ChromeTraceWriter> writer = ChromeTraceWriter::Open(path, &error);
  ASSERT_TRUE(writer) << error;
  Feed(*writer);
  std::vector<std::vector<std::string>> events;
  std::set<std::string> metas;
  std::string rank, events_stat;
  for (const auto& row : JsonFacts("chrome", path)) {
    if (row[0] == "rank") rank = row[1];
    if (row[0] == "stat" && row[1] == "events") events_stat = row[2];
    if (row[0] == "event") events.push_back(row);
    if (row[0] == "meta") metas.insert(row[1] + " " + row[3] + " " + row[4]);
  }
  EXPECT_EQ(rank, "3");
  EXPECT_EQ(events_stat, "12");
  EXPECT_TRUE(metas.count("process_name 0 python3 train.py"));
  EXPECT_TRUE(metas.count("thread_name 11 pt_autograd_0"));
  ASSERT_EQ(events.size(), 6u);
  // In arrival order; External id == Record function id == ET rf_id.
  const char* names[] = {"## LOOP 0 ##", "aten::linear", "aten::addmm", "aten::\"odd\"\xef\xbf\xbd",
                         "autograd::engine::evaluate_function: MmBackward0", "aten::addmm"};
  const char* cats[] = {"user_annotation", "cpu_op", "cpu_op", "cpu_op", "cpu_op", "cpu_op"};
  const char* tids[] = {"10", "10", "10", "10", "11", "10"};
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i][8], names[i]);
    EXPECT_EQ(events[i][1], cats[i]);
    EXPECT_EQ(events[i][3], tids[i]);
    EXPECT_EQ(events[i][6], std::to_string(i + 1));
    EXPECT_EQ(events[i][7], std::to_string(i + 1));
  }
  // Times: monotonic microseconds, exact to the nanosecond.
  EXPECT_EQ(events[2][4], std::to_string(kMono + 20));
  EXPECT_EQ(events[2][5], "780");
}

TEST(ExecutionTraceWriterTest, AnEmptyCaptureStillHasItsRootNode) {
  std::string dir = test::MakeTempDir();
  std::string error;
  auto et = ExecutionTraceWriter::Open(dir + "/e.et.json", &error);
  auto chrome = ChromeTraceWriter::Open(dir + "/e.json", &error);
  ASSERT_TRUE(et && chrome) << error;
  for (TraceSink* sink : {static_cast<TraceSink*>(et.get()), static_cast<TraceSink*>(chrome.get())}) {
    sink->Begin(Ops(), ClockSnapshot{1, kMono});
    ASSERT_TRUE(sink->Finish(TraceStats(), &error)) << error;
  }
  std::vector<std::vector<std::string>> nodes;
  for (const auto& row : JsonFacts("et", dir + "/e.et.json"))
    if (row[0] == "node") nodes.push_back(row);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0][1], "1");
  EXPECT_EQ(nodes[0][7], ExecutionTraceWriter::kProcessNode);
  for (const auto& row : JsonFacts("chrome", dir + "/e.json")) EXPECT_NE(row[0], "event");
}

TEST(ExecutionTraceWriterTest, NoFileWithoutFinish) {
  std::string dir = test::MakeTempDir();
  std::string error;
  {
    auto et = ExecutionTraceWriter::Open(dir + "/x.et.json", &error);
    ASSERT_TRUE(et) << error;
    Feed(*ExecutionTraceWriter::Open(dir + "/y.et.json", &error));
    et->Begin(Ops(), ClockSnapshot{1, kMono});
    et->AddSliceTree(1, 1, {S(0, 1, 0, 0)});
  }
  EXPECT_EQ(test::ListDir(dir), std::vector<std::string>{"y.et.json"});
}

class EtChromeRecordTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::MakeTempDir(); }
  void TearDown() override {
    if (!dir_.empty()) test::RunCommand({"rm", "-rf", dir_});  // traces, the validators' workdir
  }
  // The consumers (HTA, Chakra, PARAM) accept the pair. Steps that need a
  // ProfilerStep#N annotation must pass once the trace has one; until the
  // model has annotations they are reported, not required.
  void Validate(const std::string& et, const std::string& chrome) {
    test::CommandResult r = test::CheckEtKineto(et, chrome, dir_ + "/validate");
    if (test::ValidatorsMissing(r))
      GTEST_SKIP() << "validators lack their Python packages (check-et-kineto --install-deps)";
    std::string text = test::ReadFile(chrome);
    size_t steps = 0;
    for (size_t at = text.find("\"ProfilerStep#"); at != std::string::npos; at = text.find("\"ProfilerStep#", at + 1))
      ++steps;
    bool has_step = steps > 0;
    // HTA leaves out the last ProfilerStep of a trace (its
    // include_last_profiler_step is off), so with several steps the ET's
    // rf_ids of that step lie outside what it kept and it refuses to
    // correlate: PyTorch's own multi-step pair gets the same answer
    // (HtaDropsTheLastStepOfPyTorchsOwnPairAsOfOurs). Every
    // other step must pass, and this one wherever HTA keeps every step.
    bool hta_drops_a_step = steps > 1;
    for (const char* step : {"et-format", "ids", "et_replay", "hta-validate", "hta-load", "hta-et-correlation"}) {
      if (hta_drops_a_step && std::string(step) == "hta-et-correlation") continue;
      EXPECT_NE(r.out.find(std::string("PASS ") + step + ":"), std::string::npos) << step << "\n" << r.out;
    }
    size_t failed = 0;
    for (size_t at = r.out.find("\nFAIL "); at != std::string::npos; at = r.out.find("\nFAIL ", at + 1))
      failed += !(hta_drops_a_step && r.out.compare(at + 6, 39, "hta-et-correlation: HTA refuses to corr") == 0);
    if (has_step) {
      EXPECT_EQ(failed, 0u) << r.out;
    } else {
      std::fprintf(stderr, "  (no ProfilerStep#N in the model yet: kineto-format, hta-profiler-steps, "
                              "hta-critical-path, trace_link not required)\n");
    }
  }
  // Same op names and nesting as PyTorch's observer, rf_ids unique and shared.
  std::map<std::string, std::string> Compare(const std::string& et, const std::string& chrome,
                                             const std::string& reference) {
    test::CommandResult r = test::RunCommand({test::Python(), Fixture("et_compare.py"), et, chrome, reference});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<std::string, std::string> m = Measures(r.out);
    EXPECT_GT(std::stoull(m["ref_ops"]), 100u) << r.out;
    EXPECT_EQ(m["names_missing"], "0") << r.out;
    EXPECT_GE(std::stod(m["nesting_matched"]), 0.99) << r.out;
    EXPECT_EQ(m["rf_unique"], "1");
    EXPECT_EQ(m["rf_equal"], "1");
    EXPECT_EQ(m["kineto_rf_ok"], "1");
    return m;
  }
  std::string dir_;
};

// Bad paths: one line, non-zero, before the target is touched.
TEST_F(EtChromeRecordTest, BadPathForAnyOutputIsOneLineBeforeAttaching) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (record checks privileges first)";
  std::string dir = dir_ + "/out";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  for (const char* flag : {"--et", "--chrome", "-o"}) {
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q", "--et", dir + "/a.et.json",
                                     "--chrome", dir + "/a.json"};
    argv.push_back(flag);
    argv.push_back("/nonexistent-dir/x.json");
    argv.insert(argv.end(), {"--", "/bin/true"});
    test::CommandResult r = test::RunCommand(argv);
    EXPECT_NE(r.exit_code, 0) << flag;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << flag << ": " << r.err;
    EXPECT_NE(r.err.find("/nonexistent-dir/x.json"), std::string::npos) << r.err;
    EXPECT_TRUE(test::ListDir(dir).empty()) << flag << ": nothing written half-way";
  }
}

TEST_F(EtChromeRecordTest, TrainingLoopOnPyTorch113MatchesItsObserver) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string reference = dir_ + "/ref.json";
  test::CommandResult ref = test::RunCommand({test::Python(), Fixture("et_loop.py"), "--iters", "3",
                                              "--observer", reference});
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  std::string et = dir_ + "/t.et.json", chrome = dir_ + "/t.json", pf = dir_ + "/t.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "-o", pf, "--et", et,
                                            "--chrome", chrome, "--", test::Python(),
                                            Fixture("et_loop.py"), "--iters", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.out.find("loop done"), std::string::npos);
  EXPECT_TRUE(test::FileExists(pf)) << "all three outputs from one capture";
  std::map<std::string, std::string> m = Compare(et, chrome, reference);
  if (m["kinds"].find("annotation") != std::string::npos) {
    EXPECT_EQ(m["loops"], "3");
  }
  Validate(et, chrome);
}

TEST_F(EtChromeRecordTest, LoopAnnotationsMatchTheObserver) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string reference = dir_ + "/ref.json";
  ASSERT_EQ(test::RunCommand({test::Python(), Fixture("et_loop.py"), "--iters", "4", "--observer", reference})
                .exit_code, 0);
  std::string et = dir_ + "/t.et.json", chrome = dir_ + "/t.json";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--et", et, "--chrome",
                                            chrome, "--", test::Python(), Fixture("et_loop.py"), "--iters", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::string> m = Compare(et, chrome, reference);
  EXPECT_EQ(m["ref_loops"], "4");
  if (m["kinds"].find("annotation") == std::string::npos)
    GTEST_SKIP() << "the model has no record_function annotations yet (annotations branch): "
                    "`## LOOP i ##` cannot be counted";
  EXPECT_EQ(m["loops"], "4");
}

// `report` prints the same table from any of our formats: from the Chrome
// JSON the same rows as from the Perfetto trace of the same capture; from the
// ET (which has no times) the same ops and call counts.
TEST_F(EtChromeRecordTest, ReportReadsTheJsonFormats) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string et = dir_ + "/r.et.json", chrome = dir_ + "/r.json", pf = dir_ + "/r.pftrace";
  // As torchrun starts a rank: RANK in its environment names it in distributedInfo.
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "-o", pf, "--et", et,
                                            "--chrome", chrome, "--", "env", "RANK=4", test::Python(),
                                            Fixture("et_loop.py"), "--iters", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string rank;
  for (const auto& row : JsonFacts("chrome", chrome))
    if (row[0] == "rank") rank = row[1];
  EXPECT_EQ(rank, "4");
  // Table rows: "name ... calls", by name.
  auto rows = [](const std::string& path) {
    test::CommandResult report = test::RunCommand({test::TorchprobeBinary(), "report", "--top", "1000", path});
    EXPECT_EQ(report.exit_code, 0) << report.err;
    std::map<std::string, std::string> table;
    std::istringstream lines(report.out);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::string name, word, last;
      words >> name;
      if (name.rfind("aten::", 0) != 0) continue;
      std::string rest;
      while (words >> word) rest += " " + word, last = word;
      table[name] = rest;
      table[name + " calls"] = last;
    }
    return table;
  };
  std::map<std::string, std::string> from_pf = rows(pf), from_chrome = rows(chrome), from_et = rows(et);
  EXPECT_GT(from_pf.size(), 20u);
  EXPECT_EQ(from_chrome, from_pf);
  for (const auto& [key, value] : from_pf) {
    if (key.ends_with(" calls")) {
      EXPECT_EQ(from_et[key], value) << key;
    }
  }
  test::WriteFile(dir_ + "/bad.json", "{\"traceEvents\": [");
  test::CommandResult bad = test::RunCommand({test::TorchprobeBinary(), "report", dir_ + "/bad.json"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

// 2.6 in the trixie root, attached by pid (launch mode does not follow a
// chroot's loader); the loop runs until told to stop, so the window holds
// whole iterations whatever the attach time.
TEST_F(EtChromeRecordTest, TrainingLoopOnPyTorch26MatchesItsObserver) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  test::CommandResult root = test::RunCommand({"tools/torch2-root", "--print-path"});
  std::string path = root.out.substr(0, root.out.find('\n'));
  if (test::RunCommand({"tools/torch2-root", "--check"}).exit_code != 0)
    GTEST_SKIP() << "no PyTorch 2.x root at " << path << " (tools/torch2-root builds it)";
  std::string name = "/tmp/torchprobe-et-chrome-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", Fixture("et_loop.py"), path + name + ".py"}).exit_code, 0);
  auto in_root = [&](const std::string& args) {
    return std::vector<std::string>{"unshare", "-m", "sh", "-c",
                                    "mount -t proc proc \"$0/proc\" && exec chroot \"$0\" python3 " + name +
                                        ".py " + args,
                                    path};
  };
  test::CommandResult ref = test::RunCommand(in_root("--iters 3 --observer " + name + "-ref.json"));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  pid_t target = test::Spawn(in_root("--ready-file " + name + "-ready --stop-file " + name + "-stop"),
                             "/dev/null");
  ASSERT_TRUE(test::WaitForFile(path + name + "-ready", 120));
  std::string et = dir_ + "/t.et.json", chrome = dir_ + "/t.json";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--pid",
                                            std::to_string(target), "--duration", "0.3", "--et", et, "--chrome",
                                            chrome});
  test::WriteFile(path + name + "-stop", "");
  EXPECT_EQ(test::Wait(target), 0);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Compare(et, chrome, path + name + "-ref.json");
  Validate(et, chrome);
  for (const char* suffix : {".py", "-ref.json", "-ready", "-stop"}) unlink((path + name + suffix).c_str());
}

// A window of one whole step (--skip-steps K --steps 1): every consumer
// check passes, HTA's ET correlation included (it has no last step to drop
// but the only one, which it keeps). 1.13 launched, 2.6 attached by pid.
TEST_F(EtChromeRecordTest, OneStepWindowPassesEveryConsumerCheck) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string et = dir_ + "/one.et.json", chrome = dir_ + "/one.json";
  test::CommandResult r =
      test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--skip-steps", "3", "--steps", "1", "--et", et,
                        "--chrome", chrome, "--", test::Python(), test::TrainScript(), "--steps", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Validate(et, chrome);

  std::string path = test::Torch2Root();
  if (path.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  std::string name = "/tmp/torchprobe-one-step-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", Fixture("et_loop.py"), path + name + ".py"}).exit_code, 0);
  pid_t target = test::Spawn(
      test::Torch2Python(path, name + ".py", {"--ready-file", name + "-ready", "--stop-file", name + "-stop"}),
      "/dev/null");
  bool ready = test::WaitForFile(path + name + "-ready", 120);
  std::string et26 = dir_ + "/one26.et.json", chrome26 = dir_ + "/one26.json";
  if (ready)  // --duration: only a bound, should the window never close
    r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--pid", std::to_string(target),
                          "--skip-steps", "2", "--steps", "1", "--duration", "300", "--et", et26, "--chrome",
                          chrome26});
  test::WriteFile(path + name + "-stop", "");
  EXPECT_EQ(test::Wait(target), 0);
  for (const char* suffix : {".py", "-ready", "-stop"}) unlink((path + name + suffix).c_str());
  ASSERT_TRUE(ready);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Validate(et26, chrome26);
}

// HTA's ET correlation refuses every multi-step pair, PyTorch's own as ours:
// it loads a trace without its last ProfilerStep (include_last_profiler_step
// is off by default), and the ET's rf_ids of that step then lie outside the
// External ids it kept. Loaded with the last step, HTA correlates every row
// of both (hta_last_step.py): nothing in our outputs differs from PyTorch's.
TEST_F(EtChromeRecordTest, HtaDropsTheLastStepOfPyTorchsOwnPairAsOfOurs) {
  TP_REQUIRE_ROOT_AND_TORCH();
  auto correlation = [&](const std::string& et, const std::string& chrome) {
    test::CommandResult r = test::RunCommand(
        {test::Python(), Fixture("hta_last_step.py"), "../shared/validators", et, chrome});
    std::map<std::string, std::pair<long, long>> rows;  // label -> (rows, correlated)
    std::istringstream lines(r.out);
    std::string label;
    long n, hit;
    while (lines >> label >> n >> hit) rows[label] = {n, hit};
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return rows;
  };
  auto expect_dropped_step_only = [](std::map<std::string, std::pair<long, long>> rows, const char* whose) {
    EXPECT_EQ(rows["last_step_dropped"].second, 0) << whose << ": HTA refuses the pair by default";
    EXPECT_GT(rows["last_step_kept"].first, rows["last_step_dropped"].first) << whose;
    EXPECT_EQ(rows["last_step_kept"].second, rows["last_step_kept"].first) << whose << ": every row with it kept";
  };
  if (test::RunCommand({test::Python(), "-c", "import pandas, networkx"}).exit_code != 0)
    GTEST_SKIP() << "validators lack their Python packages (check-et-kineto --install-deps)";
  std::string et = dir_ + "/t.et.json", chrome = dir_ + "/t.json";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--et", et, "--chrome", chrome,
                                            "--", test::Python(), test::TrainScript(), "--steps", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_dropped_step_only(correlation(et, chrome), "torchprobe's");

  std::string path = test::Torch2Root();
  if (path.empty()) GTEST_SKIP() << "for PyTorch's own pair: " << test::Torch2RootMissing();
  // PyTorch's pair: torch.profiler with its ExecutionTraceObserver, 3 active steps.
  std::string name = "/tmp/torchprobe-hta-pair-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", Fixture("et_loop.py"), path + name + ".py"}).exit_code, 0);
  test::CommandResult own = test::RunCommand(test::Torch2Python(
      path, name + ".py", {"--iters", "5", "--observer", name + ".et.json", "--kineto", name + ".json"}));
  EXPECT_EQ(own.exit_code, 0) << own.err;
  expect_dropped_step_only(correlation(path + name + ".et.json", path + name + ".json"), "PyTorch's");
  for (const char* suffix : {".py", ".et.json", ".json"}) unlink((path + name + suffix).c_str());
  test::RunCommand({"rm", "-rf", path + name + ".et_resources"});  // the observer's side directory
}

}  // namespace
}  // namespace torchprobe
