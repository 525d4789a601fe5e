// --python-stacks (issue 27): the Python stack each op was called from,
// read in BPF from the interpreter's frames. First the pieces (the line
// table against CPython's own co_lines, frame slices on made-up trees),
// then CPython 3.11 with PyTorch 1.13 (host) and 3.13 with 2.6 (the trixie
// root), launched and attached by pid, against the lines the script itself
// says its ops are called from, and against torch.profiler(with_stack=True)
// on 1.13 (2.6 on 3.13 crashes there).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fakes.h"
#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/base/proc_maps.h"
#include "userspace/discover/python_runtime.h"
#include "userspace/model/python_frames.h"
#include "userspace/probe_sets/python/line_table.h"
#include "userspace/report/json_value.h"
#include "userspace/report/python_lines.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// Every code unit of every code object of a few modules: PythonLine agrees
// with what CPython's co_lines() says (None: -1).
TEST(PythonLineTableTest, AgreesWithCPythonsCoLines) {
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3";
  const char* script = R"(
import json, types, dis, json.decoder, argparse, functools, inspect
def codes(co):
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            yield from codes(c)
out = []
for m in (json.decoder, argparse, functools, inspect):
    src = compile(open(m.__file__).read(), m.__file__, 'exec')
    for co in codes(src):
        out.append([co.co_linetable.hex(), co.co_firstlineno, [[s, e, -1 if l is None else l] for s, e, l in co.co_lines()]])
print(json.dumps(out))
)";
  test::CommandResult r = test::RunCommand({test::Python(), "-c", script});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  JsonValue codes;
  std::string error;
  ASSERT_TRUE(ParseJson(r.out, &codes, &error)) << error;
  size_t units = 0, wrong = 0;
  for (const JsonValue& code : codes.items) {
    std::string table = Unhex(code.items[0].string);
    int first = static_cast<int>(code.items[1].integer);
    for (const JsonValue& range : code.items[2].items) {
      for (int64_t at = range.items[0].integer; at < range.items[1].integer; at += 2) {
        ++units;
        if (PythonLine(table, first, static_cast<int32_t>(at / 2)) != range.items[2].integer) ++wrong;
      }
    }
  }
  EXPECT_GT(units, 10000u);
  EXPECT_EQ(wrong, 0u) << "of " << units << " code units";
  EXPECT_EQ(PythonLine("", 7, -1), 7) << "a frame not started is at its first line";
}

// The interpreter of a process: its version and where its runtime is; a
// process without one, or debug offsets that are not 3.13's, one line.
TEST(PythonRuntimeTest, FindsTheHostsCPythonAndRefusesOthers) {
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3";
  std::string dir = test::MakeTempDir();
  pid_t python = test::Spawn({test::Python(), "-c", "import time; open('" + dir + "/up', 'w').close(); time.sleep(60)"},
                             "/dev/null");
  ASSERT_TRUE(test::WaitForFile(dir + "/up", 30));
  StatusOr<PythonRuntime> runtime = FindPythonRuntime(static_cast<uint32_t>(python));
  kill(python, SIGKILL);
  test::Wait(python);
  test::RemoveTempDir(dir);
  ASSERT_TRUE(runtime.ok()) << runtime.status().message();
  EXPECT_EQ(runtime->major, 3);
  EXPECT_EQ(runtime->minor, 11);
  EXPECT_NE(runtime->layout.interp_head, 0u);
  EXPECT_NE(runtime->code_type, 0u);
  pid_t sleeper = test::Spawn({"sleep", "60"}, "/dev/null");
  usleep(100 * 1000);
  StatusOr<PythonRuntime> none = FindPythonRuntime(static_cast<uint32_t>(sleeper));
  kill(sleeper, SIGKILL);
  test::Wait(sleeper);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("runs no CPython"), std::string::npos) << none.status().message();
  PythonRuntime r;
  std::string offsets(128 * 8, '\0');
  EXPECT_FALSE(LayoutFromDebugOffsets(offsets, &r).ok()) << "no cookie";
  offsets.replace(0, 8, "xdebugpy");
  uint64_t version = 0x030c05f0;  // 3.12.5
  offsets.replace(8, 8, reinterpret_cast<const char*>(&version), 8);
  Status old = LayoutFromDebugOffsets(offsets, &r);
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.message().find("not 3.13's"), std::string::npos) << old.message();
}

// ---- Frame slices on made-up trees ----

struct FramesFixture {
  test::RecordingSink sink;
  OpTable ops{{"aten::add", "", ""}, {"aten::mul", "", ""}, {"ProfilerStep#1", "", "", "user_annotation"}};
  PythonFrames frames{&sink, &ops};
  std::shared_ptr<const PythonCode> main_code = std::make_shared<PythonCode>(PythonCode{"t.py", "<module>", 1});
  std::shared_ptr<const PythonCode> step = std::make_shared<PythonCode>(PythonCode{"t.py", "step", 10});
  std::shared_ptr<const PythonCode> f = std::make_shared<PythonCode>(PythonCode{"t.py", "f", 20});
  std::shared_ptr<const PythonStack> Stack(std::vector<std::pair<std::shared_ptr<const PythonCode>, int>> frames_in,
                                           bool truncated = false) {
    auto stack = std::make_shared<PythonStack>();
    for (auto& [code, line] : frames_in) stack->frames.push_back({code, line});
    stack->truncated = truncated;
    return stack;
  }
  Slice Op(uint32_t op, uint16_t depth, uint64_t begin, uint64_t end, std::shared_ptr<const PythonStack> stack) {
    Slice s;
    s.op_id = op;
    s.depth = depth;
    s.begin_ns = begin;
    s.end_ns = end;
    s.python = std::move(stack);
    return s;
  }
  std::string Shape(const std::vector<Slice>& tree) const {
    std::string out;
    for (const Slice& s : tree) {
      out += std::string(s.depth * 2, ' ') + ops[s.op_id].name + " [" + std::to_string(s.begin_ns) + "," +
             std::to_string(s.end_ns) + "]";
      if (s.args)
        for (const SliceArg& a : *s.args) out += " " + a.name + "=" + std::to_string(a.number);
      out += "\n";
    }
    return out;
  }
};

TEST(PythonFramesTest, SiblingsCalledFromTheSameFramesShareThem) {
  FramesFixture x;
  auto a = x.Stack({{x.main_code, 30}, {x.step, 11}, {x.f, 21}});
  auto b = x.Stack({{x.main_code, 30}, {x.step, 11}, {x.f, 22}});  // the same call of f, its next line
  auto c = x.Stack({{x.main_code, 30}, {x.step, 12}});             // back in step
  x.frames.AddSliceTree(1, 1, {x.Op(2, 0, 0, 100, nullptr), x.Op(0, 1, 10, 20, a), x.Op(1, 2, 12, 18, a),
                               x.Op(1, 1, 30, 40, b), x.Op(0, 1, 50, 60, c)});
  ASSERT_EQ(x.sink.trees.size(), 1u);
  EXPECT_EQ(x.Shape(x.sink.trees[0]),
            "ProfilerStep#1 [0,100]\n"
            "  t.py(1): <module> [10,60]\n"
            "    t.py(10): step [10,60] caller line=30\n"
            "      t.py(20): f [10,40] caller line=11\n"
            "        aten::add [10,20] python line=21\n"
            "          aten::mul [12,18]\n"
            "        aten::mul [30,40] python line=22\n"
            "      aten::add [50,60] python line=12\n");
  EXPECT_EQ(x.sink.known_ops, x.ops.size()) << "the frames' names were announced";
  EXPECT_EQ(x.ops[3].category, kPythonFunction);
}

TEST(PythonFramesTest, ACallFromAnotherLineIsAnotherCallAndTruncationIsMarked) {
  FramesFixture x;
  auto first = x.Stack({{x.main_code, 30}, {x.f, 21}});
  auto second = x.Stack({{x.main_code, 31}, {x.f, 21}});
  auto deep = x.Stack({{x.f, 21}}, true);
  x.frames.AddSliceTree(1, 1, {x.Op(2, 0, 0, 100, nullptr), x.Op(0, 1, 10, 20, first), x.Op(0, 1, 30, 40, second),
                               x.Op(1, 1, 50, 60, deep)});
  EXPECT_EQ(x.Shape(x.sink.trees[0]),
            "ProfilerStep#1 [0,100]\n"
            "  t.py(1): <module> [10,40]\n"
            "    t.py(20): f [10,20] caller line=30\n"
            "      aten::add [10,20] python line=21\n"
            "    t.py(20): f [30,40] caller line=31\n"
            "      aten::add [30,40] python line=21\n"
            "  <truncated>(0): outer frames not read [50,60]\n"
            "    t.py(20): f [50,60]\n"
            "      aten::mul [50,60] python line=21\n");
}

// ---- Real interpreters ----

class PythonStacksTest : public test::ScratchTest {
 protected:
  // The places the script says its ops are called from: op -> (file, qualname, line).
  struct Place {
    std::string file, function;
    int64_t line = 0;
  };
  std::map<std::string, Place> Places(const std::string& path, const std::string& root = "") {
    JsonValue json;
    std::string error;
    EXPECT_TRUE(ParseJson(test::ReadFile(root + path), &json, &error)) << error;
    std::map<std::string, Place> places;
    if (const JsonValue* p = json.Find("places"))
      for (const auto& [op, where] : p->members)
        places[op] = {where.items[0].string, where.items[1].string, where.items[2].integer};
    return places;
  }

  // Each slice of the ops the script places, checked against its place: the
  // innermost frame around it and the line it carries (or its caller op's).
  void ExpectPlaces(const std::string& trace_path, const std::map<std::string, Place>& places, const std::string& what) {
    DecodedTrace trace;
    std::string error;
    ASSERT_TRUE(ReadTrace(trace_path, &trace, &error)) << error;
    size_t checked = 0, right = 0, truncated_marked = 0, abs_calls = 0;
    std::map<std::string, size_t> seen;
    std::string wrong;
    for (const DecodedThread& thread : trace.threads) {
      for (size_t i = 0; i < thread.slices.size(); ++i) {
        const DecodedSlice& slice = thread.slices[i];
        const OpInfo& op = trace.ops[slice.op];
        auto place = places.find(op.name);
        if (place == places.end() || slice.python_line < 0) continue;  // a nested call of the same name
        ++checked;
        ++seen[op.name];
        int32_t frame = slice.parent;
        while (frame >= 0 && trace.ops[thread.slices[frame].op].category != kPythonFunction)
          frame = thread.slices[frame].parent;
        std::string name = frame >= 0 ? trace.ops[thread.slices[frame].op].name : "(none)";
        std::string want = place->second.file + "(";
        bool ok = name.rfind(want, 0) == 0 && name.ends_with("): " + place->second.function) &&
                  slice.python_line == place->second.line;
        if (ok) ++right;
        else if (wrong.size() < 2000)
          wrong += "  " + op.name + ": " + name + " line " + std::to_string(slice.python_line) + ", want " +
                   place->second.function + " line " + std::to_string(place->second.line) + "\n";
        if (op.name == "aten::abs") {  // the recursion: deeper than the walk keeps
          ++abs_calls;
          size_t frames = 0;
          int32_t outer = frame;
          for (int32_t j = frame; j >= 0; j = thread.slices[j].parent)
            if (trace.ops[thread.slices[j].op].category == kPythonFunction) {
              ++frames;
              outer = j;
            }
          if (outer >= 0 && trace.ops[thread.slices[outer].op].name.rfind("<truncated>(0)", 0) == 0 &&
              frames == TP_PY_MAX_FRAMES + 1)
            ++truncated_marked;
        }
      }
    }
    EXPECT_EQ(seen.size(), places.size()) << what << ": every place's op was seen";
    EXPECT_GT(checked, 100u) << what;
    EXPECT_GE(right, checked * 99 / 100) << what << ": " << right << " of " << checked << " right\n" << wrong;
    EXPECT_GT(abs_calls, 0u) << what;
    EXPECT_EQ(truncated_marked, abs_calls) << what << ": the recursion's stacks end in the truncation marker";
    // A code object freed before userspace read it (a module's top-level
    // code, run once while it is imported) is counted, not named: a few.
    EXPECT_LE(trace.stats.CountOf("python.unresolved_frames"), trace.stats.CountOf("python.frames") / 100) << what;
    EXPECT_GT(trace.stats.CountOf("python.frames"), 0u) << what;
    EXPECT_GT(trace.stats.CountOf("python.truncated"), 0u) << what;
  }

  void ExpectTraceProcessorReadsIt(const std::string& trace_path) {
    std::string tp = test::TraceProcessor();
    if (tp.empty()) return;
    std::vector<std::vector<std::string>> rows = test::QueryTrace(
        trace_path, "select (select count(*) from slice where category = 'python_function'), "
                    "(select count(*) from stats where severity in ('error', 'data_loss') and value > 0)");
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_GT(std::stoll(rows[0][0]), 100) << "python_function slices";
    EXPECT_EQ(rows[0][1], "0") << "trace_processor's errors and data losses";
  }
};

TEST_F(PythonStacksTest, Python311LaunchedOpsNameTheirLines) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string trace = dir_ + "/t.pftrace", chrome = dir_ + "/t.json", out = dir_ + "/places.json";
  std::string et = dir_ + "/t.et.json";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "--python-stacks", "-o", trace,
                                            "--chrome", chrome, "--et", et, "--", test::Python(),
                                            test::Fixture("python_stacks.py"), out, "30"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("Python stacks:"), std::string::npos) << r.err;
  ExpectPlaces(trace, Places(out), "3.11 launched");
  ExpectTraceProcessorReadsIt(trace);
  std::string kineto = test::ReadFile(chrome);
  EXPECT_NE(kineto.find("\"cat\": \"python_function\""), std::string::npos);
  EXPECT_NE(kineto.find("\"Python parent id\""), std::string::npos);
  // Frames take no rf_id: the ET's and the Kineto JSON's still join one to one.
  std::set<int64_t> et_ids, kineto_ids;
  JsonValue json;
  std::string parse_error;
  ASSERT_TRUE(ParseJson(test::ReadFile(et), &json, &parse_error)) << parse_error;
  for (const JsonValue& node : json.Find("nodes")->items)
    for (const JsonValue& attr : node.Find("attrs")->items)
      if (attr.Find("name")->string == "rf_id" && attr.Find("value")->integer)  // 0: the thread nodes
        et_ids.insert(attr.Find("value")->integer);
  ASSERT_TRUE(ParseJson(kineto, &json, &parse_error)) << parse_error;
  for (const JsonValue& event : json.Find("traceEvents")->items)
    if (const JsonValue* args = event.Find("args"))
      if (const JsonValue* id = args->Find("Record function id")) kineto_ids.insert(id->integer);
  EXPECT_GT(kineto_ids.size(), 100u);
  EXPECT_EQ(et_ids, kineto_ids);
  // report --by-line and --folded add up to the ops' time.
  DecodedTrace decoded;
  std::string error;
  ASSERT_TRUE(ReadTrace(trace, &decoded, &error)) << error;
  uint64_t by_line = 0;
  for (const LineTime& row : TimeByLine(decoded)) by_line += row.self_ns;
  r = test::RunCommand({test::TorchprobeBinary(), "report", "--folded", trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  uint64_t folded = 0;
  std::istringstream lines(r.out);
  bool level3_line = false;
  for (std::string line; std::getline(lines, line);) {
    folded += std::stoull(line.substr(line.rfind(' ') + 1));
    level3_line |= line.find("level1 (") != std::string::npos && line.find(";level3 (") != std::string::npos &&
                   line.find(";aten::sin") != std::string::npos;
  }
  uint64_t ops = 0;  // every op's self time
  for (const DecodedThread& thread : decoded.threads) {
    std::vector<uint64_t> self(thread.slices.size());
    for (size_t i = 0; i < thread.slices.size(); ++i) self[i] = thread.slices[i].end_ns - thread.slices[i].begin_ns;
    for (const DecodedSlice& s : thread.slices)
      if (s.parent >= 0) self[s.parent] -= std::min(self[s.parent], s.end_ns - s.begin_ns);
    for (size_t i = 0; i < thread.slices.size(); ++i)
      if (decoded.ops[thread.slices[i].op].category.empty()) ops += self[i];
  }
  EXPECT_GT(ops, 0u);
  EXPECT_EQ(by_line, ops);
  EXPECT_EQ(folded, ops);
  EXPECT_TRUE(level3_line) << r.out.substr(0, 3000);
  r = test::RunCommand({test::TorchprobeBinary(), "report", "--by-line", trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("python_stacks.py:"), std::string::npos) << r.out;
}

TEST_F(PythonStacksTest, Python311AttachedByPid) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string trace = dir_ + "/t.pftrace", out = dir_ + "/places.json", ready = dir_ + "/ready", go = dir_ + "/go";
  pid_t target = test::Spawn({test::Python(), test::Fixture("python_stacks.py"), out, "30", ready, go},
                             dir_ + "/target.out");
  std::vector<pid_t> running = {target};
  struct Reap {  // a failed assertion leaves nothing running
    std::vector<pid_t>* pids;
    ~Reap() {
      for (pid_t pid : *pids) {
        kill(pid, SIGKILL);
        test::Wait(pid);
      }
    }
  } reap{&running};
  ASSERT_TRUE(test::WaitForFile(ready, 60)) << test::ReadFile(dir_ + "/target.out");
  // record stops itself once it records (a test hook): then the loop starts.
  pid_t record = test::Spawn({"env", "TORCHPROBE_TEST_PAUSE=recording", test::TorchprobeBinary(), "record", "-q",
                              "--python-stacks", "--pid", std::to_string(target), "-o", trace},
                             "/dev/null");
  running.push_back(record);
  ASSERT_TRUE(test::WaitUntil([&] { return ReadProcessState(static_cast<uint32_t>(record)) == 'T'; }, 60))
      << "record never attached";
  kill(record, SIGCONT);
  test::WriteFile(go, "");
  EXPECT_EQ(test::Wait(target), 0) << test::ReadFile(dir_ + "/target.out");
  EXPECT_EQ(test::Wait(record), 0) << "record stops when its target exits";
  running.clear();
  ExpectPlaces(trace, Places(out), "3.11 attached by pid");
}

TEST_F(PythonStacksTest, Python313OfPyTorch26) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  std::string name = "/tmp/torchprobe-stacks-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", test::Fixture("python_stacks.py"), root + name + ".py"}).exit_code, 0);
  std::string trace = dir_ + "/t.pftrace";
  std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "--python-stacks", "-o", trace, "--"};
  for (const std::string& arg : test::Torch2Python(root, name + ".py", {name + ".json", "30"})) argv.push_back(arg);
  test::CommandResult r = test::RunCommand(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, Place> places = Places(name + ".json", root);
  // The script names its file as the root sees it; the trace does too.
  ExpectPlaces(trace, places, "3.13 (PyTorch 2.6) launched");
  for (const char* suffix : {".py", ".json"}) unlink((root + name + suffix).c_str());
}

// On 1.13, torch.profiler(with_stack=True) on the same script: the stacks
// within the script (frames of its own file, innermost first, by function
// name) are the profiler's for >= 99% of the placed ops.
TEST_F(PythonStacksTest, StacksAreTheProfilersOnPyTorch113) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string script = test::Fixture("python_stacks.py");
  std::string profile = dir_ + "/profile.json";
  test::CommandResult r = test::RunCommand({test::Python(), script, dir_ + "/p.json", "10", "--profile", profile});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string trace = dir_ + "/t.pftrace";
  r = test::RunCommand({test::TorchprobeBinary(), "record", "--python-stacks", "-o", trace, "--", test::Python(),
                        script, dir_ + "/places.json", "10"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, Place> places = Places(dir_ + "/places.json");
  auto last = [](std::string_view function) {
    size_t dot = function.rfind('.');
    return std::string(dot == std::string_view::npos ? function : function.substr(dot + 1));
  };
  // The profiler's: op -> stack (its most common) of the script's own frames.
  JsonValue events;
  std::string error;
  ASSERT_TRUE(ParseJson(test::ReadFile(profile), &events, &error)) << error;
  std::map<std::string, std::map<std::string, size_t>> theirs;
  for (const JsonValue& event : events.items) {
    const std::string& op = event.Find("name")->string;
    if (!places.count(op)) continue;
    std::string stack;
    for (const JsonValue& frame : event.Find("stack")->items) {
      const std::string& f = frame.string;  // "FILE(LINE): NAME"
      size_t close = f.find("): ");
      if (close == std::string::npos || f.rfind(script, 0) != 0) continue;
      stack += last(f.substr(close + 3)) + ";";
    }
    ++theirs[op][stack];
  }
  std::map<std::string, std::string> reference;
  for (const auto& [op, stacks] : theirs) {
    size_t most = 0;
    for (const auto& [stack, n] : stacks)
      if (n > most) {
        most = n;
        reference[op] = stack;
      }
  }
  ASSERT_EQ(reference.size(), places.size());
  DecodedTrace decoded;
  ASSERT_TRUE(ReadTrace(trace, &decoded, &error)) << error;
  size_t checked = 0, equal = 0;
  std::string diff;
  for (const DecodedThread& thread : decoded.threads) {
    for (size_t i = 0; i < thread.slices.size(); ++i) {
      const DecodedSlice& slice = thread.slices[i];
      const std::string& op = decoded.ops[slice.op].name;
      if (!reference.count(op) || slice.python_line < 0) continue;
      std::string stack;
      bool truncated = false;
      for (int32_t j = slice.parent; j >= 0; j = thread.slices[j].parent) {
        const std::string& name = decoded.ops[thread.slices[j].op].name;
        if (decoded.ops[thread.slices[j].op].category != kPythonFunction) continue;
        truncated |= name.rfind("<truncated>", 0) == 0;
        size_t close = name.find("): ");
        if (name.rfind(script, 0) == 0) stack += last(name.substr(close + 3)) + ";";
      }
      ++checked;
      // A truncated stack is the profiler's innermost frames.
      bool same = truncated ? reference[op].rfind(stack, 0) == 0 : reference[op] == stack;
      if (same) ++equal;
      else if (diff.size() < 1500) diff += op + ": ours " + stack + "\n  theirs " + reference[op] + "\n";
    }
  }
  EXPECT_GT(checked, 50u);
  EXPECT_GE(equal, checked * 99 / 100) << equal << " of " << checked << "\n" << diff;
}

}  // namespace
}  // namespace torchprobe
