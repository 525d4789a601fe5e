// Annotations: record_function ranges as torch.profiler shows them, with no
// profiler in the target. Pure logic first (the model's ranges on synthetic
// events), then PyTorch 1.13 (host) and 2.6 (the trixie root), launched and
// attached by pid, against PyTorch's own execution graph of the same script.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fakes.h"
#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/collect/event_router.h"
#include "userspace/discover/annotation_probes.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/model/annotation_model.h"
#include "userspace/model/op_stack_model.h"
#include "userspace/report/report.h"
#include "userspace/report/trace_reader.h"
#include "userspace/probe_sets/annotations/annotation_probe_set.h"

namespace torchprobe {
namespace {

// ---- Tier 1: the model, on events made here ----

tp_annot_begin Begin(uint32_t tid, uint64_t record, uint64_t ts, const std::string& name,
                     uint8_t flags = 0) {
  tp_annot_begin e = {};
  e.a.hdr = {EV_ANNOT_BEGIN, sizeof(e), 1, tid, 0, ts};
  e.a.record = record;
  e.a.begin_tid = tid;
  e.a.name_len = static_cast<uint16_t>(std::min(name.size(), sizeof(e.name)));
  e.a.name_flags = flags;
  std::memcpy(e.name, name.data(), e.a.name_len);
  return e;
}

tp_annot_begin End(uint32_t tid, uint32_t begin_tid, uint64_t record, uint64_t ts) {
  tp_annot_begin e = {};
  e.a.hdr = {EV_ANNOT_END, sizeof(tp_annot_event), 1, tid, 0, ts};
  e.a.record = record;
  e.a.begin_tid = begin_tid;
  return e;
}

tp_op_event Op(uint16_t type, uint32_t tid, uint32_t op, uint64_t frame, uint64_t ts) {
  return test::OpEvent(type, 1, tid, ts, op, frame);
}

struct ModelFixture {
  test::RecordingSink sink;
  test::FixedNames names{"p", "", "t"};
  OpStackModel model{&sink, &names, OpStackModel::Options{0, 1 << 16}};
  OpTable ops{{"aten::mm", "", ""}};
  int grew = 0;
  AnnotationModel annotations{&model, &ops, [this] { ++grew; }};
  std::string Name(const Slice& s) const { return ops[s.op_id].name; }
};

TEST(AnnotationModelTest, RangesEncloseTheOpsBetweenTheirBeginAndEnd) {
  ModelFixture f;
  f.model.SetStart(1);
  f.annotations.OnEvent(Begin(7, 0xA0, 10, "## LOOP 0 ##"));
  f.model.OnOpEvent(Op(EV_OP_ENTER, 7, 0, 0x7000, 20));
  f.model.OnOpEvent(Op(EV_OP_EXIT, 7, 0, 0x7000, 30));
  f.annotations.OnEvent(Begin(7, 0xB0, 40, "inner"));
  // A later call on a higher frame than the range's own: frames say nothing
  // of ranges, so it stays inside.
  f.model.OnOpEvent(Op(EV_OP_ENTER, 7, 0, 0x9000, 50));
  f.model.OnOpEvent(Op(EV_OP_EXIT, 7, 0, 0x9000, 60));
  f.annotations.OnEvent(End(7, 7, 0xB0, 70));
  f.annotations.OnEvent(End(7, 7, 0xA0, 80));
  f.annotations.OnEvent(Begin(7, 0xA0, 90, "## LOOP 0 ##"));  // same name: same id
  f.annotations.OnEvent(End(7, 7, 0xA0, 95));
  f.model.FinishThreads(100);
  ASSERT_EQ(f.sink.slices.size(), 5u);
  std::vector<std::pair<std::string, int>> shape;
  for (const auto& [tid, s] : f.sink.slices) shape.push_back({f.Name(s), s.depth});
  EXPECT_EQ(shape, (std::vector<std::pair<std::string, int>>{
                       {"## LOOP 0 ##", 0}, {"aten::mm", 1}, {"inner", 1}, {"aten::mm", 2}, {"## LOOP 0 ##", 0}}));
  EXPECT_EQ(f.sink.slices[0].second.end_ns, 80u);
  EXPECT_EQ(f.sink.slices[2].second.begin_ns, 40u);
  EXPECT_EQ(f.sink.slices[2].second.end_ns, 70u);
  for (const auto& [tid, s] : f.sink.slices) EXPECT_EQ(s.flags, 0) << f.Name(s);
  EXPECT_EQ(f.ops.size(), 3u);
  EXPECT_EQ(f.ops[1].category, kUserAnnotation);
  EXPECT_EQ(f.grew, 2);
  EXPECT_EQ(f.model.stats().annotations, 3u);
  EXPECT_EQ(f.model.stats().end_repaired, 0u);
}

TEST(AnnotationModelTest, OpenAtStopOrAtItsEndIsClosedAndMarked) {
  ModelFixture f;
  f.model.SetStart(1);
  f.annotations.OnEvent(Begin(7, 0xA0, 10, "outer"));
  f.annotations.OnEvent(Begin(7, 0xB0, 20, "never ended"));
  f.model.OnOpEvent(Op(EV_OP_ENTER, 7, 0, 0x7000, 30));  // its return lost
  f.annotations.OnEvent(End(7, 7, 0xA0, 40));  // closes both inside, marked
  f.annotations.OnEvent(Begin(7, 0xC0, 50, "open at stop"));
  f.model.FinishThreads(60);
  ASSERT_EQ(f.sink.slices.size(), 4u);
  EXPECT_EQ(f.sink.slices[0].second.flags, 0);
  EXPECT_EQ(f.sink.slices[1].second.flags, kSliceEndUnseen);
  EXPECT_EQ(f.sink.slices[1].second.end_ns, 40u);
  EXPECT_EQ(f.sink.slices[2].second.flags, kSliceEndUnseen);
  EXPECT_EQ(f.Name(f.sink.slices[3].second), "open at stop");
  EXPECT_EQ(f.sink.slices[3].second.flags, kSliceEndUnseen);
  EXPECT_EQ(f.sink.slices[3].second.end_ns, 60u);
  EXPECT_EQ(f.model.stats().end_repaired, 3u);
  EXPECT_EQ(f.model.stats().mismatched_exits, 1u);
}

TEST(AnnotationModelTest, EndedOnAnotherThreadAndUnreadableNames) {
  ModelFixture f;
  f.model.SetStart(1);
  f.annotations.OnEvent(Begin(7, 0xA0, 10, "", ANNOT_NAME_FAULT));
  f.annotations.OnEvent(Begin(8, 0xB0, 12, "", ANNOT_NAME_UNSEEN));
  f.annotations.OnEvent(Begin(8, 0xC0, 14, std::string(TP_ANNOT_NAME_MAX, 'x'), ANNOT_NAME_TRUNCATED));
  f.annotations.OnEvent(End(9, 7, 0xA0, 20));  // ended by thread 9: closes on 7's track
  f.annotations.OnEvent(End(8, 8, 0xC0, 22));
  f.annotations.OnEvent(End(8, 8, 0xB0, 24));
  f.model.FinishThreads(30);
  std::map<std::string, uint64_t> ends;
  for (const auto& [tid, s] : f.sink.slices) ends[std::to_string(tid) + " " + f.Name(s)] = s.end_ns;
  EXPECT_EQ(ends["7 " + std::string(kUnreadableAnnotation)], 20u);
  EXPECT_EQ(ends["8 " + std::string(kUnnamedAnnotation)], 24u);
  EXPECT_EQ(ends["8 " + std::string(TP_ANNOT_NAME_MAX, 'x')], 22u);
  EXPECT_EQ(f.model.stats().annotation_names_unread, 2u);
  EXPECT_EQ(f.model.stats().annotation_names_cut, 1u);
  EXPECT_EQ(f.model.stats().end_repaired, 0u);
}

// Attached mid-range: a thread's first range whose name went by before its
// process' probes were live is said to be that, counted apart from names
// that could not be read; later nameless ranges are unnamed.
TEST(AnnotationModelTest, ARangeNamedBeforeItsProbesWentLiveIsSaidAndCountedApart) {
  ModelFixture f;
  f.model.SetStart(1);
  const uint8_t before = ANNOT_NAME_UNSEEN | ANNOT_NAME_BEFORE_TRACE;
  f.annotations.OnEvent(Begin(7, 0xA0, 10, "", before));  // pid 1's probes not said live: unnamed
  f.annotations.SetLive(1, 1'000);
  f.annotations.OnEvent(Begin(8, 0xB0, 2'000, "", before));
  f.annotations.OnEvent(Begin(9, 0xC0, 1'000 + kNamedBeforeTraceNs + 1, "", before));  // too late for that
  f.annotations.OnEvent(Begin(8, 0xD0, 3'000, "", ANNOT_NAME_UNSEEN));
  f.model.FinishThreads(kNamedBeforeTraceNs * 2);
  std::map<std::string, int> names;
  for (const auto& [tid, s] : f.sink.slices) ++names[std::to_string(tid) + " " + f.Name(s)];
  EXPECT_EQ(names["8 " + std::string(kNamedBeforeTraceAnnotation)], 1);
  EXPECT_EQ(names["7 " + std::string(kUnnamedAnnotation)], 1);
  EXPECT_EQ(names["9 " + std::string(kUnnamedAnnotation)], 1);
  EXPECT_EQ(names["8 " + std::string(kUnnamedAnnotation)], 1);
  EXPECT_EQ(f.model.stats().CountOf(kNamesBeforeTraceCount), 1u);
  EXPECT_EQ(f.model.stats().annotation_names_unread, 3u);
  f.annotations.Forget(1);
  f.annotations.OnEvent(Begin(10, 0xE0, 2'000, "", before));
  EXPECT_EQ(f.model.stats().CountOf(kNamesBeforeTraceCount), 1u) << "its process forgotten";
}

// The annotation set's routes: a begin with its name, an end with only the
// common part; a begin without its name is refused.
TEST(AnnotationModelTest, RoutedBeginsWithNamesAndShortEnds) {
  ModelFixture f;
  f.model.SetStart(1);
  AnnotationProbeSet set;
  ModelWiring wiring;
  wiring.model = &f.model;
  wiring.ops = &f.ops;
  wiring.ops_grew = [&f] { ++f.grew; };
  set.Wire(wiring);
  EventRouter router;
  set.Route(router);
  tp_annot_begin begin = Begin(7, 0xA0, 10, "name");
  tp_annot_begin end = End(7, 7, 0xA0, 20);
  EXPECT_TRUE(router.Route(&begin, sizeof(begin)));
  EXPECT_TRUE(router.Route(&end, sizeof(tp_annot_event)));
  begin.a.hdr.size = sizeof(tp_annot_event);  // a begin without its name
  EXPECT_FALSE(router.Route(&begin, sizeof(tp_annot_event)));
  EXPECT_EQ(router.stats().decoded, 2u);
  EXPECT_EQ(router.stats().malformed, 1u);
  // The set's model took the begin: its name is an op name now.
  EXPECT_TRUE(std::any_of(f.ops.begin(), f.ops.end(), [](const OpInfo& op) { return op.name == "name"; }));
}

// Where the probes go in Debian's libtorch 1.13 and the trixie root's 2.6:
// every kind found; RecordFunction::end() probed on the jcc after its first
// compare (the kernel single-steps a compare: ~10x dearer), not its entry.
TEST(AnnotationProbesTest, FoundInLibtorchWithEndProbedPastItsCompare) {
  std::vector<std::string> libs = test::LibtorchImages();
  if (libs.empty()) GTEST_SKIP() << "no libtorch_cpu 1.13 or 2.6 here";
  for (const std::string& lib : libs) {
    StatusOr<AnnotationProbes> probes = FindAnnotationProbes(lib);
    ASSERT_TRUE(probes.ok()) << probes.status().message();
    std::set<uint64_t> kinds(probes->cookies.begin(), probes->cookies.end());
    EXPECT_EQ(kinds, (std::set<uint64_t>{ANNOT_PROBE_NAME, ANNOT_PROBE_BEGIN, ANNOT_PROBE_END,
                                         ANNOT_PROBE_C_BEGIN}))
        << lib;
    StatusOr<uint64_t> end = FindFunctionOffset(lib, "_ZN2at14RecordFunction3endEv");
    ASSERT_TRUE(end.ok());
    uint64_t probed = 0;
    for (size_t i = 0; i < probes->offsets.size(); ++i)
      if (probes->cookies[i] == ANNOT_PROBE_END) probed = probes->offsets[i];
    EXPECT_GT(probed, *end) << lib;
    EXPECT_LE(probed, *end + 8) << lib;
    std::ifstream file(lib, std::ios::binary);
    file.seekg(static_cast<std::streamoff>(probed));
    EXPECT_EQ(file.get() & 0xf0, 0x70) << lib << ": a short jcc";
  }
  EXPECT_FALSE(FindAnnotationProbes("/bin/true").ok());
}

// The flight recorder's light tier: one probe, a mark on the binding's
// ConstantString::create (both versions' Python passes the name through
// it; 1.13's never reaches the record_function_enter_new it also exports),
// and none on the constructor or end() that every RECORD_FUNCTION site hits.
TEST(AnnotationProbesTest, TheLightTierMarksTheNameOnlyOnBothVersions) {
  std::vector<std::string> libs = test::LibtorchImages();
  if (libs.empty()) GTEST_SKIP() << "no libtorch_cpu 1.13 or 2.6 here";
  for (const std::string& lib : libs) {
    StatusOr<AnnotationProbes> probes = FindAnnotationProbes(lib, AnnotationPlan::kStepMarks);
    ASSERT_TRUE(probes.ok()) << probes.status().message();
    ASSERT_EQ(probes->offsets.size(), 1u) << lib;
    EXPECT_EQ(probes->cookies[0], ANNOT_PROBE_MARK) << lib;
    StatusOr<uint64_t> create = FindFunctionOffset(
        lib, "_ZN3c106ivalue14ConstantString6createENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
    ASSERT_TRUE(create.ok()) << lib;
    EXPECT_GE(probes->offsets[0], *create) << lib;
    EXPECT_LE(probes->offsets[0], *create + 4) << lib << ": at its entry (past an endbr64)";
  }
  EXPECT_FALSE(FindAnnotationProbes("/bin/true", AnnotationPlan::kStepMarks).ok());
}

// ---- Tiers 2: real PyTorch ----

using Counts = std::map<std::string, double>;

std::string Fixture() {
  std::string script = test::TrainScript();
  return script.replace(script.rfind("train.py"), 8, "annotations.py");
}

bool IsLoop(const std::string& name) { return name.rfind("## LOOP ", 0) == 0; }
std::string Written(const std::string& name) { return IsLoop(name) ? "## LOOP # ##" : name; }

// What annotations.py --profile wrote, per LOOP iteration.
Counts ProfiledPerIteration(const std::string& text) {
  Counts counts;
  std::istringstream in(text);
  std::string line;
  double loops = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> cells = test::SplitTabs(line);
    if (cells.size() != 3 || cells[0] != "parent") continue;
    counts[cells[1] + " <- " + (cells[2] == "-" ? "" : cells[2])] += 1;
    loops += cells[1] == "## LOOP # ##";
  }
  for (auto& [key, n] : counts) n /= std::max(loops, 1.0);
  return counts;
}

struct Loops {
  Counts per_iteration;        // "NAME <- PARENT" inside whole LOOPs, per LOOP
  std::vector<long> numbers;   // i of each whole `## LOOP i ##`, in order
  size_t marked = 0;           // LOOPs repaired at the trace's edges
};

// The slices inside whole LOOP ranges of `trace`, keyed as the profile is.
Loops CountLoops(const DecodedTrace& trace) {
  Loops loops;
  Counts counts;
  for (const DecodedThread& t : trace.threads) {
    std::vector<int32_t> loop_of(t.slices.size(), -1);
    for (size_t i = 0; i < t.slices.size(); ++i) {
      const DecodedSlice& s = t.slices[i];
      const std::string& name = trace.ops[s.op].name;
      if (IsLoop(name) && s.parent < 0) {
        if (s.repaired_begin || s.repaired_end) {
          ++loops.marked;
          continue;
        }
        loop_of[i] = static_cast<int32_t>(i);
        loops.numbers.push_back(std::stol(name.substr(8)));
      } else if (s.parent >= 0) {
        loop_of[i] = loop_of[s.parent];
      }
      if (loop_of[i] < 0) continue;
      std::string parent = s.parent >= 0 ? Written(trace.ops[t.slices[s.parent].op].name) : "";
      counts[Written(name) + " <- " + parent] += 1;
    }
  }
  for (auto& [key, n] : counts) n /= std::max<double>(loops.numbers.size(), 1);
  loops.per_iteration = counts;
  return loops;
}

// Every LOOP once per call with its own number, in order, and nesting as
// the profiler's (parent parity >= 99% both ways).
void ExpectLoopsMatch(const DecodedTrace& trace, const Counts& profiled, size_t at_least) {
  Loops loops = CountLoops(trace);
  ASSERT_GE(loops.numbers.size(), at_least);
  for (size_t i = 1; i < loops.numbers.size(); ++i)
    ASSERT_EQ(loops.numbers[i], loops.numbers[i - 1] + 1) << "a LOOP missing or seen twice";
  EXPECT_LE(loops.marked, 2u);
  double recall = test::CountAgreement(loops.per_iteration, profiled);
  double precision = test::CountAgreement(profiled, loops.per_iteration);
  EXPECT_GE(recall, 0.99) << test::CountDisagreements(loops.per_iteration, profiled);
  EXPECT_GE(precision, 0.99) << test::CountDisagreements(loops.per_iteration, profiled);
  // Every name read; at most the one range at the attach boundary had its
  // name passed before the probes were live (its begin after): said so and
  // counted apart, never misnamed.
  EXPECT_EQ(trace.stats.annotation_names_unread, 0u);
  EXPECT_LE(trace.stats.CountOf(kNamesBeforeTraceCount), 1u);
  EXPECT_EQ(trace.stats.annotation_names_cut, 0u);
  std::printf("[ parity ] %zu LOOPs: parents recall %.4f precision %.4f\n", loops.numbers.size(),
              recall, precision);
}

DecodedTrace Read(const std::string& path) {
  DecodedTrace trace;
  std::string error;
  EXPECT_TRUE(ReadTrace(path, &trace, &error)) << error;
  return trace;
}

class AnnotationTest : public test::ScratchTest {
 protected:
  // The PyTorch 2.x root, or "" (then the caller skips).
  static std::string Torch2Root() {
    if (test::RunCommand({"tools/torch2-root", "--check"}).exit_code != 0) return "";
    std::string out = test::RunCommand({"tools/torch2-root", "--print-path"}).out;
    return out.substr(0, out.find('\n'));
  }
  // argv running `script_in_root` with `args` by python3 in `root`.
  static std::vector<std::string> InRoot(const std::string& root, const std::string& script_in_root,
                                         const std::string& args) {
    return {"unshare", "-m", "sh", "-c",
            "mount -t proc proc \"$0/proc\" && exec chroot \"$0\" python3 " + script_in_root + " " + args,
            root};
  }
};

TEST_F(AnnotationTest, LaunchedRangesMatchTorchProfiler) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/launched.pftrace", profile = dir_ + "/profile.txt";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "-o", out, "--",
                                            test::Python(), Fixture(), "--iterations", "40"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(test::RunCommand({test::Python(), Fixture(), "--iterations", "40", "--profile", profile}).exit_code, 0);
  DecodedTrace trace = Read(out);
  ExpectLoopsMatch(trace, ProfiledPerIteration(test::ReadFile(profile)), 40);
  Loops loops = CountLoops(trace);
  EXPECT_EQ(loops.numbers.size(), 40u);
  EXPECT_EQ(loops.numbers.front(), 0);
  EXPECT_EQ(loops.marked, 0u);
  if (!test::TraceProcessor().empty()) {
    auto rows = test::QueryTrace(out, "select count(*) from slice where category = 'user_annotation' "
                                      "and name = 'a range whose name is longer than fifteen bytes'");
    EXPECT_EQ(rows, (std::vector<std::vector<std::string>>{{"40"}}));
  }
}

TEST_F(AnnotationTest, AttachedRangesMatchTorchProfiler) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string ready = dir_ + "/ready", out = dir_ + "/attached.pftrace", profile = dir_ + "/profile.txt";
  pid_t target = test::Spawn({test::Python(), Fixture(), "--iterations", "0", "--ready-file", ready}, "/dev/null");
  spawned_.push_back(target);
  ASSERT_TRUE(test::WaitForFile(ready, 60));
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--pid",
                                            std::to_string(target), "--duration", "1", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(test::RunCommand({test::Python(), Fixture(), "--iterations", "20", "--profile", profile}).exit_code, 0);
  ExpectLoopsMatch(Read(out), ProfiledPerIteration(test::ReadFile(profile)), 20);
}

TEST_F(AnnotationTest, AttachedRangesMatchTorchProfilerOnPyTorch2) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  std::string root = Torch2Root();
  if (root.empty()) GTEST_SKIP() << "no PyTorch 2.x root (tools/torch2-root builds it)";
  // Unique names in the root: other sessions' tests run there too.
  std::string name = "/tmp/torchprobe-annotations-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", Fixture(), root + name + ".py"}).exit_code, 0);
  std::string out = dir_ + "/attached26.pftrace";
  pid_t target = test::Spawn(InRoot(root, name + ".py", "--iterations 0 --ready-file " + name + ".ready"), "/dev/null");
  spawned_.push_back(target);
  bool ready = test::WaitForFile(root + name + ".ready", 120);
  test::CommandResult r;
  if (ready) {
    // unshare, sh and chroot exec one another: the pid is python's by now.
    r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--pid", std::to_string(target),
                          "--duration", "1", "-o", out});
  }
  test::CommandResult p = test::RunCommand(InRoot(root, name + ".py", "--iterations 20 --profile " + name + ".txt"));
  std::string profile = test::ReadFile(root + name + ".txt");
  for (const char* suffix : {".py", ".ready", ".txt"}) unlink((root + name + suffix).c_str());
  ASSERT_TRUE(ready);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(p.exit_code, 0) << p.err;
  ExpectLoopsMatch(Read(out), ProfiledPerIteration(profile), 20);
}

// A libtorch without the annotation probe points (the stand-in fixture):
// its ops are traced, and the process is counted as not probed for ranges.
TEST_F(AnnotationTest, LibtorchWithoutProbePointsIsCountedNotAnError) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  std::string storm = "build/fixtures/op_storm";
  if (!test::FileExists(storm)) GTEST_SKIP() << storm << " not built (make test builds it)";
  std::string out = dir_ + "/storm.pftrace";
  test::CommandResult r =
      test::RunCommand({test::TorchprobeBinary(), "record", "-q", "-o", out, "--", storm, "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = Read(out);
  EXPECT_GT(trace.slice_count(), 0u);
  EXPECT_EQ(trace.stats.annotations_unprobed, 1u);
  EXPECT_EQ(trace.stats.annotations, 0u);
  std::ostringstream report;
  PrintReport(trace, report);
  EXPECT_NE(report.str().find("1 process whose libtorch has no record_function probe points"),
            std::string::npos)
      << report.str();
}

// Done-when 5, the stop side: a range open when tracing stops ends there,
// marked like an op. (One open when tracing starts is not seen at all: its
// name was passed before the probes, and its end() cannot be told from any
// other record's.)
TEST_F(AnnotationTest, RangeOpenAtStopIsClosedAndMarked) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/held.pftrace";
  pid_t tracer = test::Spawn({test::TorchprobeBinary(), "record", "-q", "-o", out, "--", test::Python(),
                              Fixture(), "--hold", dir_},
                             dir_ + "/record.out");
  spawned_.push_back(tracer);
  ASSERT_TRUE(test::WaitForFile(dir_ + "/entered", 60));
  kill(tracer, SIGINT);
  bool written = test::WaitForFile(out, 60);  // written before torchprobe waits for the command
  test::RunCommand({"touch", dir_ + "/release"});
  EXPECT_EQ(test::Wait(tracer), 0);
  spawned_.clear();
  ASSERT_TRUE(written);
  DecodedTrace trace = Read(out);
  size_t held = 0;
  for (const DecodedThread& t : trace.threads) {
    for (const DecodedSlice& s : t.slices) {
      if (trace.ops[s.op].name != "## HELD ##") continue;
      ++held;
      EXPECT_TRUE(s.repaired_end);
      EXPECT_FALSE(s.repaired_begin);
      EXPECT_EQ(trace.ops[s.op].category, kUserAnnotation);
    }
  }
  EXPECT_EQ(held, 1u);
  EXPECT_GE(trace.stats.end_repaired, 1u);
}

}  // namespace
}  // namespace torchprobe
