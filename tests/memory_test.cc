// --memory: CPU allocations and frees. The allocation table and glibc's chunk
// sizes on their own; then against PyTorch itself (Debian's 1.13 and, where
// tools/torch2-root built it, 2.6): the same allocations per step as
// profile(profile_memory=True), joined to the same ops, a counter back at the
// same level at every step boundary, and an attach mid-run that sizes
// pre-existing frees and names a deliberate leak.
#include <gtest/gtest.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/png_reader.h"
#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/discover/allocator_probes.h"
#include "userspace/export/pickle_writer.h"
#include "userspace/model/memory_model.h"
#include "userspace/report/json_value.h"
#include "userspace/report/memory_summary.h"
#include "userspace/report/report.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

// --- the allocation table -------------------------------------------------

class RecordingSink : public MemorySink {
 public:
  void AddMemoryEvent(const MemoryEvent& event) override { events.push_back(event); }
  std::vector<MemoryEvent> events;
};

tp_mem_event Probe(uint16_t type, uint64_t address, uint64_t bytes, uint64_t ts) {
  tp_mem_event e = {};
  e.hdr.type = type;
  e.hdr.size = sizeof(e);
  e.hdr.pid = 7;
  e.hdr.tid = 8;
  e.hdr.ts_ns = ts;
  e.address = address;
  e.bytes = bytes;
  return e;
}

class MemoryModelTest : public testing::Test {
 protected:
  RecordingSink sink;
  TraceStats stats;
  MemoryModel model{&sink, &stats};
};

TEST_F(MemoryModelTest, FreesFindTheirAllocationAndItsOp) {
  model.OnEvent(Probe(EV_MEM_ALLOC, 0x1000, 100, 1), 3);
  model.OnEvent(Probe(EV_MEM_ALLOC, 0x2000, 50, 2), kNoOp);
  model.OnEvent(Probe(EV_MEM_FREE, 0x1000, 0, 3), 5);
  model.Finish();
  ASSERT_EQ(sink.events.size(), 3u);
  EXPECT_EQ(sink.events[0].allocated, 100u);
  EXPECT_EQ(sink.events[1].allocated, 150u);
  EXPECT_EQ(sink.events[1].op_id, kNoOp);
  const MemoryEvent& free = sink.events[2];
  EXPECT_EQ(free.kind, MemoryEvent::kFree);
  EXPECT_EQ(free.bytes, 100u);
  EXPECT_EQ(free.id, sink.events[0].id);
  EXPECT_EQ(free.alloc_op_id, 3u);
  EXPECT_EQ(free.op_id, 5u);
  EXPECT_EQ(free.alloc_ts_ns, 1u);
  EXPECT_EQ(free.allocated, 50u);
  EXPECT_EQ(stats.allocations, 2u);
  EXPECT_EQ(stats.frees, 1u);
  EXPECT_EQ(stats.memory_alive_at_end, 1u);
}

TEST_F(MemoryModelTest, PreexistingFreesAreSizedAndNeverLowerTheCounter) {
  model.OnEvent(Probe(EV_MEM_ALLOC, 0x1000, 64, 1), 0);
  model.OnEvent(Probe(EV_MEM_FREE, 0x9000, 0x91, 2), 0);  // 144-byte chunk, in use
  model.OnEvent(Probe(EV_MEM_FREE, 0xa000, 0, 3), 0);     // header unreadable
  ASSERT_EQ(sink.events.size(), 3u);
  EXPECT_EQ(sink.events[1].kind, MemoryEvent::kPreexistingFree);
  EXPECT_EQ(sink.events[1].bytes, 136u);
  EXPECT_EQ(sink.events[1].allocated, 64u);
  EXPECT_EQ(sink.events[2].bytes, 0u);
  EXPECT_EQ(stats.preexisting_frees, 2u);
  EXPECT_EQ(stats.preexisting_unsized, 1u);
}

TEST_F(MemoryModelTest, AnAddressAllocatedTwiceCountsALostFree) {
  model.OnEvent(Probe(EV_MEM_ALLOC, 0x1000, 64, 1), 0);
  model.OnEvent(Probe(EV_MEM_ALLOC, 0x1000, 32, 2), 0);
  EXPECT_EQ(stats.lost_frees, 1u);
  ASSERT_EQ(sink.events.size(), 3u);  // the lost free, late, then the allocation
  EXPECT_EQ(sink.events[1].kind, MemoryEvent::kFree);
  EXPECT_EQ(sink.events[1].allocated, 0u);
  EXPECT_EQ(sink.events.back().allocated, 32u);
}

// The probe reads the size word before the pointer: glibc's own chunks,
// small and mmapped, give back malloc_usable_size.
TEST(ChunkHeaderTest, GivesGlibcsUsableSize) {
  for (size_t bytes : {1ul, 24ul, 100ul, 4096ul, 100000ul, 8ul << 20}) {
    void* p = nullptr;
    ASSERT_EQ(posix_memalign(&p, 64, bytes), 0);  // as c10::alloc_cpu does
    uint64_t word;
    std::memcpy(&word, static_cast<char*>(p) - 8, sizeof(word));
    EXPECT_EQ(MemoryModel::ChunkUsableBytes(word), malloc_usable_size(p)) << bytes;
    EXPECT_GE(MemoryModel::ChunkUsableBytes(word), bytes);
    free(p);
  }
  EXPECT_EQ(MemoryModel::ChunkUsableBytes(0), 0u);
  EXPECT_EQ(MemoryModel::ChunkUsableBytes(0x7f0000000123), 0u);  // not a size
}

// Both PyTorch's libc10s (1.13 and, where built, 2.6's in the trixie root):
// the allocator's entry, its returns, the free and the device report.
TEST(AllocatorProbesTest, FoundInDebiansLibc10s) {
  test::CommandResult root = test::RunCommand({"tools/torch2-root", "--print-path"});
  std::string path = root.out.substr(0, root.out.find('\n'));
  int found = 0;
  for (const std::string& lib : {std::string("/usr/lib/x86_64-linux-gnu/libc10.so.1.13"),
                                 path + "/usr/lib/x86_64-linux-gnu/libc10.so.2.6"}) {
    if (!test::FileExists(lib)) continue;
    ++found;
    StatusOr<AllocatorProbes> probes = FindAllocatorProbes(lib);
    ASSERT_TRUE(probes.ok()) << probes.status().message();
    EXPECT_NE(probes->alloc_offset, 0u) << lib;
    EXPECT_NE(probes->free_offset, 0u) << lib;
    EXPECT_FALSE(probes->alloc_returns.empty()) << lib;
    EXPECT_NE(probes->device_report_offset, 0u) << lib;
  }
  if (found == 0) GTEST_SKIP() << "no libc10 (python3-torch)";
  StatusOr<AllocatorProbes> none = FindAllocatorProbes("/bin/true");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("CPU memory cannot be traced"), std::string::npos);
}

// --- against PyTorch ------------------------------------------------------

std::string FixtureScript() {
  std::string script = test::TrainScript();
  script.replace(script.rfind("train.py"), 8, "memory_steps.py");
  return script;
}

struct Allocations {
  std::vector<uint64_t> markers;  // step boundaries (profiler us, trace ns)
  struct One {
    uint64_t ts;
    uint64_t bytes;
    std::string op;
  };
  std::vector<One> allocs;  // in time order
  uint64_t bytes() const {
    uint64_t n = 0;
    for (const One& a : allocs) n += a.bytes;
    return n;
  }
  // The allocations of step `k` (between its marker and the next).
  std::vector<One> Step(size_t k) const {
    std::vector<One> out;
    for (const One& a : allocs)
      if (a.ts > markers[k] && (k + 1 == markers.size() || a.ts < markers[k + 1])) out.push_back(a);
    return out;
  }
};

Allocations ParseProfile(const std::string& text) {
  Allocations out;
  std::istringstream in(text);
  std::string kind;
  while (in >> kind) {
    uint64_t ts = 0, bytes = 0;
    std::string op;
    if (kind == "marker" && in >> ts) out.markers.push_back(ts);
    else if (kind == "alloc" && in >> ts >> bytes >> op) out.allocs.push_back({ts, bytes, op == "-" ? "" : op});
  }
  return out;
}

Allocations FromTrace(const DecodedTrace& trace) {
  Allocations out;
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices)
      if (trace.ops[s.op].name == "aten::sign_") out.markers.push_back(s.begin_ns);
  std::sort(out.markers.begin(), out.markers.end());
  for (const DecodedMemoryEvent& e : trace.memory)
    if (e.alloc) out.allocs.push_back({e.ts_ns, e.bytes, e.op});
  std::sort(out.allocs.begin(), out.allocs.end(),
            [](const Allocations::One& a, const Allocations::One& b) { return a.ts < b.ts; });
  return out;
}

DecodedTrace ReadOrFail(const std::string& path) {
  DecodedTrace trace;
  std::string error;
  EXPECT_TRUE(ReadTrace(path, &trace, &error)) << error;
  return trace;
}

// Runs `prefix + [script, --steps N, ...]` under profile(profile_memory=True)
// and under torchprobe --memory, short and long.
struct ParityRuns {
  Allocations profiled[2];
  Allocations traced[2];
  DecodedTrace long_trace;
  std::string long_path;
};
constexpr int kShort = 4, kLong = 12;

void RunParity(const std::vector<std::string>& prefix, const std::string& script,
               const std::string& profile_dir_here, const std::string& profile_dir_there,
               const std::string& dir, ParityRuns* runs) {
  int steps[2] = {kShort, kLong};
  for (int i = 0; i < 2; ++i) {
    std::string name = "/torchprobe-memory-profile-" + std::to_string(getpid()) + "-" + std::to_string(i);
    std::vector<std::string> argv = prefix;
    for (const std::string& a : {script, std::string("--steps"), std::to_string(steps[i]),
                                 std::string("--profile"), profile_dir_there + name})
      argv.push_back(a);
    test::CommandResult p = test::RunCommand(argv);
    ASSERT_EQ(p.exit_code, 0) << p.err;
    runs->profiled[i] = ParseProfile(test::ReadFile(profile_dir_here + name));
    unlink((profile_dir_here + name).c_str());

    std::string out = dir + "/memory" + std::to_string(steps[i]) + ".pftrace";
    argv = {test::TorchprobeBinary(), "record", "-q", "--memory", "-o", out, "--"};
    argv.insert(argv.end(), prefix.begin(), prefix.end());
    for (const std::string& a : {script, std::string("--steps"), std::to_string(steps[i])}) argv.push_back(a);
    test::CommandResult r = test::RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    DecodedTrace trace = ReadOrFail(out);
    EXPECT_EQ(trace.stats.memory_traced, 1u);
    EXPECT_EQ(trace.stats.memory_dropped, 0u);
    EXPECT_EQ(trace.stats.lost_frees, 0u);
    runs->traced[i] = FromTrace(trace);
    ASSERT_EQ(runs->traced[i].markers.size(), static_cast<size_t>(steps[i]));
    if (i == 1) {
      runs->long_trace = std::move(trace);
      runs->long_path = out;
    }
  }
}

// Issue 9, 1 and 2: per step, as many allocations and bytes as the profiler
// (long minus short runs: whatever both do once cancels); the same op made
// each of a steady step's allocations.
void ExpectParity(const ParityRuns& runs) {
  double span = kLong - kShort;
  double profiled_allocs = (runs.profiled[1].allocs.size() - runs.profiled[0].allocs.size()) / span;
  double profiled_bytes = (double(runs.profiled[1].bytes()) - double(runs.profiled[0].bytes())) / span;
  double traced_allocs = (runs.traced[1].allocs.size() - runs.traced[0].allocs.size()) / span;
  double traced_bytes = (double(runs.traced[1].bytes()) - double(runs.traced[0].bytes())) / span;
  std::printf("per step: profiler %.2f allocations %.0f B; torchprobe %.2f allocations %.0f B\n",
              profiled_allocs, profiled_bytes, traced_allocs, traced_bytes);
  ASSERT_GT(profiled_allocs, 5);
  EXPECT_NEAR(traced_allocs, profiled_allocs, profiled_allocs * 0.01);
  EXPECT_NEAR(traced_bytes, profiled_bytes, profiled_bytes * 0.01);

  // A steady step (not the first: it makes the momentum buffers).
  size_t k = 2;
  ASSERT_GT(runs.profiled[0].markers.size(), k);
  std::vector<Allocations::One> want = runs.profiled[0].Step(k);
  std::vector<Allocations::One> got = runs.traced[0].Step(k);
  ASSERT_EQ(got.size(), want.size());
  size_t same = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].bytes, want[i].bytes) << i;
    if (got[i].op == want[i].op) ++same;
    else std::printf("allocation %zu: profiler says %s, torchprobe %s\n", i, want[i].op.c_str(), got[i].op.c_str());
  }
  std::printf("parent op agrees for %zu of %zu allocations\n", same, want.size());
  EXPECT_GE(same * 100, want.size() * 95);
}

// Issue 9, 1: at every step boundary after the first step the counter track
// is where it was at the previous one.
void ExpectCounterLevelAtBoundaries(const std::string& trace) {
  if (test::TraceProcessor().empty()) GTEST_SKIP() << "no trace_processor_shell";
  auto rows = test::QueryTrace(
      trace,
      "select s.ts, (select c.value from counter c join process_counter_track t on c.track_id = t.id "
      "where t.name = 'CPU memory allocated' and c.ts <= s.ts order by c.ts desc limit 1) "
      "from slice s where s.name = 'aten::sign_' order by s.ts");
  ASSERT_EQ(rows.size(), static_cast<size_t>(kLong));
  for (size_t i = 2; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 2u);
    EXPECT_EQ(rows[i][1], rows[1][1]) << "step " << i;
  }
  auto bad = test::QueryTrace(trace, "select name, value from stats where value > 0 and severity != 'info'");
  EXPECT_TRUE(bad.empty()) << bad.front().front();
}

class MemoryTest : public test::ScratchTest {
 protected:
  // memory_steps.py --leak, running, recorded by pid for 3 s with `flags`
  // (--memory ...) into `out`: what its list keeps is alive as the trace
  // ends (a launched trace ends at the exit, when the list is freed).
  void RecordLeakingTarget(const std::vector<std::string>& flags, const std::string& out) {
    std::string ready = dir_ + "/ready";
    pid_t target = test::Spawn({test::Python(), FixtureScript(), "--steps", "100000000", "--leak",
                                "--ready-file", ready},
                               "/dev/null");
    spawned_.push_back(target);
    ASSERT_TRUE(test::WaitForFile(ready, 60));
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "-q"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--pid", std::to_string(target), "--duration", "3", "-o", out});
    test::CommandResult r = test::RunCommand(argv);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
};

TEST_F(MemoryTest, SameAllocationsAsTheProfilerOnPyTorch1) {
  TP_REQUIRE_ROOT_AND_TORCH();
  ParityRuns runs;
  ASSERT_NO_FATAL_FAILURE(RunParity({test::Python()}, FixtureScript(), "/tmp", "/tmp", dir_, &runs));
  ExpectParity(runs);
  ExpectCounterLevelAtBoundaries(runs.long_path);
}

TEST_F(MemoryTest, SameAllocationsAsTheProfilerOnPyTorch2) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  test::CommandResult root = test::RunCommand({"tools/torch2-root", "--print-path"});
  std::string path = root.out.substr(0, root.out.find('\n'));
  if (test::RunCommand({"tools/torch2-root", "--check"}).exit_code != 0)
    GTEST_SKIP() << "no PyTorch 2.x root at " << path << " (tools/torch2-root builds it)";
  // The fixture and the train.py it imports, side by side in the root.
  std::string there = "/tmp/torchprobe-memory-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"mkdir", "-p", path + there}).exit_code, 0);
  std::string fixtures = test::TrainScript().substr(0, test::TrainScript().rfind('/'));
  ASSERT_EQ(test::RunCommand({"cp", fixtures + "/train.py", fixtures + "/memory_steps.py", path + there}).exit_code, 0);
  ParityRuns runs;
  RunParity({"unshare", "-m", "sh", "-c",
             "mount -t proc proc \"$0/proc\" && shift && exec chroot \"$0\" python3 \"$@\"", path, path},
            there + "/memory_steps.py", path + there, there, dir_, &runs);
  test::RunCommand({"rm", "-rf", path + there});
  if (HasFatalFailure()) return;
  ExpectParity(runs);
  ExpectCounterLevelAtBoundaries(runs.long_path);
}

// The span of ProfilerStep#first .. #last in `trace`; {0, 0} when either is missing.
std::pair<uint64_t, uint64_t> StepSpan(const DecodedTrace& trace, int first, int last) {
  std::pair<uint64_t, uint64_t> span{0, 0};
  for (const DecodedThread& t : trace.threads)
    for (const DecodedSlice& s : t.slices) {
      const std::string& name = trace.ops[s.op].name;
      if (name == "ProfilerStep#" + std::to_string(first)) span.first = s.begin_ns;
      if (name == "ProfilerStep#" + std::to_string(last)) span.second = s.end_ns;
    }
  return span.first && span.second ? span : std::pair<uint64_t, uint64_t>{0, 0};
}

// The sizes of the allocations in [from, to], in time order.
std::vector<uint64_t> AllocSizes(const DecodedTrace& trace, uint64_t from, uint64_t to) {
  std::vector<std::pair<uint64_t, uint64_t>> allocs;
  for (const DecodedMemoryEvent& e : trace.memory)
    if (e.alloc && e.device.empty() && e.ts_ns >= from && e.ts_ns <= to) allocs.emplace_back(e.ts_ns, e.bytes);
  std::sort(allocs.begin(), allocs.end());
  std::vector<uint64_t> sizes;
  for (const auto& a : allocs) sizes.push_back(a.second);
  return sizes;
}

// Issue 28, 4: `--memory --steps 2 --skip-steps 3 --every-steps 3` writes
// exactly the allocations of ProfilerStep#3-#4 and #6-#7: the same as a
// whole-run trace of the same program has between those steps' bounds, and
// nothing outside them; the rest is counted.
TEST_F(MemoryTest, StepWindowsHoldExactlyTheirStepsAllocations) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string full = dir_ + "/full.pftrace", windows = dir_ + "/steps.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--memory", "-o", full, "--",
                                            test::Python(), FixtureScript(), "--steps", "9"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--memory", "--steps", "2", "--skip-steps", "3",
                        "--every-steps", "3", "-o", windows, "--memory-timeline", dir_ + "/steps.json", "--",
                        test::Python(), FixtureScript(), "--steps", "9"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace whole = ReadOrFail(full);
  size_t timeline_allocs = 0;
  for (int w = 0; w < 2; ++w) {
    SCOPED_TRACE("window " + std::to_string(w));
    std::string path = dir_ + "/steps." + std::to_string(w) + ".pftrace";
    DecodedTrace trace = ReadOrFail(path);
    int first = 3 + 3 * w;
    auto span = StepSpan(trace, first, first + 1);
    ASSERT_NE(span.first, 0u) << "ProfilerStep#" << first << "-#" << first + 1 << " missing";
    auto whole_span = StepSpan(whole, first, first + 1);
    ASSERT_NE(whole_span.first, 0u);
    std::vector<uint64_t> want = AllocSizes(whole, whole_span.first, whole_span.second);
    std::vector<uint64_t> got = AllocSizes(trace, span.first, span.second);
    ASSERT_GT(want.size(), 5u);
    EXPECT_EQ(got, want);
    size_t allocs = 0, outside = 0;
    for (const DecodedMemoryEvent& e : trace.memory) {
      allocs += e.alloc;
      outside += e.ts_ns < span.first || e.ts_ns > span.second;
    }
    EXPECT_EQ(allocs, got.size());
    EXPECT_EQ(outside, 0u);
    timeline_allocs += allocs;
    EXPECT_GT(trace.stats.memory_outside_steps, 0u);
    EXPECT_EQ(trace.stats.memory_dropped, 0u);
    if (!test::TraceProcessor().empty()) {
      auto bad = test::QueryTrace(path, "select name, value from stats where value > 0 and severity != 'info'");
      EXPECT_TRUE(bad.empty()) << bad.front().front();
    }
  }
  // The timeline holds what the windows hold.
  std::string timeline = test::ReadFile(dir_ + "/steps.json");
  size_t rows = 0;
  for (size_t at = timeline.find(", 2, ["); at != std::string::npos; at = timeline.find(", 2, [", at + 1)) ++rows;  // CREATE
  EXPECT_EQ(rows, timeline_allocs);
}

// Issue 29: with --memory, the Kineto JSON carries Kineto's [memory]
// instant per allocation and free (as profile_memory=True writes them): as
// many as the trace's, Bytes negative for a free, Total Allocated the
// running sum of Bytes, on the thread that made them.
TEST_F(MemoryTest, KinetoJsonCarriesMemoryInstants) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/k.pftrace", chrome = dir_ + "/k.json";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--memory", "--chrome", chrome,
                                            "-o", out, "--", test::Python(), FixtureScript(), "--steps", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = ReadOrFail(out);
  JsonValue json;
  std::string error;
  ASSERT_TRUE(ParseJson(test::ReadFile(chrome), &json, &error)) << error;
  const JsonValue* events = json.Find("traceEvents");
  ASSERT_NE(events, nullptr);
  uint64_t allocs = 0, frees = 0;
  int64_t total = 0;
  std::set<uint64_t> threads;
  for (const DecodedThread& t : trace.threads) threads.insert(t.tid);
  for (const JsonValue& e : events->items) {
    const JsonValue* name = e.Find("name");
    if (!name || name->string != "[memory]") continue;
    EXPECT_EQ(e.Find("ph")->string, "i");
    EXPECT_EQ(e.Find("cat")->string, "cpu_instant_event");
    const JsonValue* args = e.Find("args");
    ASSERT_NE(args, nullptr);
    int64_t bytes = static_cast<int64_t>(args->Find("Bytes")->number);
    (bytes > 0 ? allocs : frees) += 1;
    total += bytes;
    EXPECT_EQ(static_cast<int64_t>(args->Find("Total Allocated")->number), total);
    EXPECT_EQ(args->Find("Device Id")->number, -1);
    EXPECT_EQ(args->Find("Device Type")->number, 0);
    EXPECT_NE(args->Find("Addr")->number, 0);
  }
  EXPECT_EQ(allocs, trace.stats.allocations);
  EXPECT_EQ(frees, trace.stats.frees);
  EXPECT_GT(allocs, 100u);
}

// Issue 9, 3: attached mid-run, the frees of what was allocated before are
// pre-existing and sized; the counter never goes negative; the list that
// grows every step is named by `report` with the op that allocates it.
TEST_F(MemoryTest, AttachMidRunSizesPreexistingFreesAndNamesALeak) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/leak.pftrace";
  RecordLeakingTarget({"--memory"}, out);
  if (HasFatalFailure()) return;
  DecodedTrace trace = ReadOrFail(out);
  EXPECT_GT(trace.stats.preexisting_frees, 0u);
  EXPECT_EQ(trace.stats.preexisting_unsized, 0u);
  size_t preexisting = 0;
  for (const DecodedMemoryEvent& e : trace.memory) {
    if (!e.preexisting) continue;
    ++preexisting;
    EXPECT_GT(e.bytes, 0u);
  }
  EXPECT_EQ(preexisting, trace.stats.preexisting_frees);
  if (!test::TraceProcessor().empty()) {
    auto rows = test::QueryTrace(out, "select min(c.value), count(*) from counter c join process_counter_track t "
                                      "on c.track_id = t.id where t.name = 'CPU memory allocated'");
    ASSERT_EQ(rows.size(), 1u);
    ASSERT_EQ(rows[0].size(), 2u);
    EXPECT_GE(std::stod(rows[0][0]), 0.0);
    EXPECT_GT(std::stoull(rows[0][1]), 100u);
  }
  std::vector<ProcessMemory> memory = SummarizeMemory(trace);
  ASSERT_EQ(memory.size(), 1u);
  ASSERT_EQ(memory[0].leaks.size(), 1u) << "only the list grows";
  EXPECT_EQ(memory[0].leaks[0].op, "aten::mul");
  std::ostringstream report;
  PrintReport(trace, report);
  std::string text = report.str();
  size_t line = text.find("LEAK CANDIDATE");
  ASSERT_NE(line, std::string::npos) << text;
  size_t start = text.rfind('\n', line) + 1;
  EXPECT_NE(text.substr(start, line - start).find("aten::mul"), std::string::npos) << text;
}

// With --python-stacks, allocations carry the line they were made from
// (an op's: the line that called the op), and the leak candidate names the
// line that keeps growing the list: memory_steps.py's kept.append(...).
TEST_F(MemoryTest, WithPythonStacksTheLeakCandidateNamesItsLine) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/lines.pftrace";
  RecordLeakingTarget({"--memory", "--python-stacks"}, out);
  if (HasFatalFailure()) return;
  DecodedTrace trace = ReadOrFail(out);
  int leak_line = -1;
  std::istringstream source(test::ReadFile(FixtureScript()));
  std::string text_line;
  for (int number = 1; std::getline(source, text_line); ++number)
    if (text_line.find("kept.append(torch.ones(256) * 2)") != std::string::npos) leak_line = number;
  ASSERT_GT(leak_line, 0);
  size_t allocs = 0, with_line = 0;
  for (const DecodedMemoryEvent& e : trace.memory) {
    if (!e.alloc || !e.device.empty()) continue;
    ++allocs;
    with_line += !e.python.empty();
  }
  ASSERT_GT(allocs, 100u);
  EXPECT_GT(with_line, allocs * 9 / 10) << "the training loop's allocations are made from Python";
  std::vector<ProcessMemory> memory = SummarizeMemory(trace);
  ASSERT_EQ(memory.size(), 1u);
  ASSERT_EQ(memory[0].leaks.size(), 1u);
  EXPECT_EQ(memory[0].leaks[0].op, "aten::mul");
  // co_filename: the script's path as CPython made it absolute.
  std::string place = "memory_steps.py(" + std::to_string(leak_line) + "): loop";
  EXPECT_TRUE(memory[0].leaks[0].python.ends_with("/" + place)) << memory[0].leaks[0].python;
  std::ostringstream report;
  PrintReport(trace, report);
  EXPECT_TRUE(std::regex_search(report.str(), std::regex("LEAK CANDIDATE.*\\n +made at [^ ]*/" +
                                                         std::regex_replace(place, std::regex("[().]"), "\\$&"))))
      << report.str();
}

// Without --memory the trace says memory was not traced.
TEST_F(MemoryTest, WithoutTheFlagTheReportSaysMemoryWasNotTraced) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string out = dir_ + "/plain.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "-o", out, "--",
                                            test::Python(), FixtureScript(), "--steps", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = ReadOrFail(out);
  EXPECT_EQ(trace.stats.memory_traced, 0u);
  EXPECT_TRUE(trace.memory.empty());
  std::ostringstream report;
  PrintReport(trace, report);
  EXPECT_NE(report.str().find("not traced (record with --memory)"), std::string::npos) << report.str();
}

// Issue 9, 4: the timeline JSON holds PyTorch's rows; the totals rebuilt from
// it at each time equal the counter track.
TEST_F(MemoryTest, TimelineJsonRebuildsTheCounterTrack) {
  TP_REQUIRE_ROOT_AND_TORCH();
  if (test::TraceProcessor().empty()) GTEST_SKIP() << "no trace_processor_shell";
  std::string ready = dir_ + "/ready", out = dir_ + "/t.pftrace", json = dir_ + "/t.json";
  // Attached mid-run, so that pre-existing frees are in it too.
  pid_t target = test::Spawn({test::Python(), FixtureScript(), "--steps", "100000000", "--ready-file", ready},
                             "/dev/null");
  spawned_.push_back(target);
  ASSERT_TRUE(test::WaitForFile(ready, 60));
  // 3 s: a loaded machine still runs a few steps, whose first frees what the
  // step before the attach made.
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--memory-timeline", json,
                                            "--pid", std::to_string(target), "--duration", "3", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // [[t, action, [id, version], bytes], ...]: five numbers a row.
  std::string text = test::ReadFile(json);
  ASSERT_TRUE(text.size() > 2 && text[0] == '[' && text[1] == '[') << text.substr(0, 100);
  for (char& c : text)
    if (c == '[' || c == ']' || c == ',') c = ' ';
  std::istringstream in(text);
  struct Row {
    int64_t t;
    int action;
    uint64_t id, version, bytes;
  };
  std::vector<Row> rows;
  Row row;
  while (in >> row.t >> row.action >> row.id >> row.version >> row.bytes) rows.push_back(row);
  ASSERT_TRUE(in.eof()) << "not all rows have 5 numbers";
  ASSERT_GT(rows.size(), 100u);
  std::set<uint64_t> preexisting;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i) {
      EXPECT_LE(rows[i - 1].t, rows[i].t) << "sorted by time";
    }
    EXPECT_TRUE(rows[i].action == 1 || rows[i].action == 2 || rows[i].action == 4) << rows[i].action;
    EXPECT_EQ(rows[i].version, 0u);
    if (rows[i].action == 1) {
      EXPECT_EQ(rows[i].t, -1);
      preexisting.insert(rows[i].id);
    }
  }
  EXPECT_FALSE(preexisting.empty());
  std::map<int64_t, int64_t> rebuilt;  // time -> total after its last row
  int64_t total = 0;
  for (const Row& x : rows) {
    if (x.action == 1 || preexisting.count(x.id)) continue;
    total += x.action == 2 ? static_cast<int64_t>(x.bytes) : -static_cast<int64_t>(x.bytes);
    ASSERT_GE(total, 0);
    rebuilt[x.t] = total;
  }
  auto counter = test::QueryTrace(out, "select c.ts, cast(c.value as int) from counter c join process_counter_track t "
                                       "on c.track_id = t.id where t.name = 'CPU memory allocated' order by c.ts");
  std::map<int64_t, int64_t> track;  // the last value at each time
  for (const auto& cells : counter) {
    ASSERT_EQ(cells.size(), 2u) << cells.front();
    track[std::stoll(cells[0])] = std::stoll(cells[1]);
  }
  // trace_processor puts our MONOTONIC times on BOOTTIME through the
  // trace's clock snapshot: the same shift for every time.
  DecodedTrace trace = ReadOrFail(out);
  ASSERT_TRUE(trace.has_clock_snapshot);
  int64_t shift = static_cast<int64_t>(trace.clock.boottime_ns - trace.clock.monotonic_ns);
  size_t compared = 0;
  for (const auto& [t, v] : rebuilt) {
    auto it = track.find(t + shift);
    ASSERT_NE(it, track.end()) << "no counter value at " << t;
    EXPECT_EQ(it->second, v) << "at " << t;
    ++compared;
  }
  // The counter's other times are pre-existing frees: it stays where it was.
  EXPECT_EQ(track.size() - compared, [&] {
    std::set<int64_t> times;
    for (const Row& x : rows)
      if (x.action == 4 && preexisting.count(x.id) && !rebuilt.count(x.t)) times.insert(x.t);
    return times.size();
  }());
  EXPECT_GT(compared, 100u);
}

// Issue 9, 4: the .html page opens in headless Chromium and shows the plot.
TEST_F(MemoryTest, TimelineHtmlShowsThePlotInChromium) {
  TP_REQUIRE_ROOT_AND_TORCH();
  if (test::RunCommand({"sh", "-c", "command -v chromium"}).exit_code != 0)
    GTEST_SKIP() << "no chromium (tools/install-deps installs it)";
  std::string out = dir_ + "/h.pftrace", html = dir_ + "/h.html", png = dir_ + "/h.png";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--memory-timeline", html,
                                            "-o", out, "--", test::Python(), FixtureScript(), "--steps", "6"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string page = test::ReadFile(html);
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg")) << "no network reference";
  EXPECT_EQ(page.find("https://"), std::string::npos);
  test::CommandResult shot = test::RunCommand(
      {"timeout", "120", "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--screenshot=" + png,
       "--window-size=1280,600", "file://" + html},
      {"HOME=" + dir_});
  ASSERT_TRUE(test::FileExists(png)) << shot.err;
  test::Image image;
  std::string error;
  ASSERT_TRUE(test::DecodePng(test::ReadFile(png), &image, &error)) << error;
  EXPECT_EQ(image.width, 1280u);
  // The bands' colours fill part of the plot: count saturated pixels (the
  // page is white, text and axes black or grey).
  size_t coloured = 0;
  std::set<uint32_t> colours;
  for (size_t i = 0; i + 2 < image.rgb.size(); i += 3) {
    int r8 = image.rgb[i], g8 = image.rgb[i + 1], b8 = image.rgb[i + 2];
    if (std::max({r8, g8, b8}) - std::min({r8, g8, b8}) < 40) continue;
    ++coloured;
    colours.insert((uint32_t(r8 / 32) << 16) | (uint32_t(g8 / 32) << 8) | uint32_t(b8 / 32));
  }
  size_t pixels = size_t{image.width} * image.height;
  std::printf("screenshot: %zu of %zu pixels coloured, %zu colours\n", coloured, pixels, colours.size());
  EXPECT_GT(coloured * 100, pixels * 2) << "the plot is not drawn";
  EXPECT_GE(colours.size(), 4u) << "several bands";
}

// Python's unpickler reads what PickleWriter writes: ints of every width
// (two's complement past 32 bits, 2^64 - 1 unsigned), bools, None, tuples,
// nested containers, and a str whose bad UTF-8 byte became '?'.
TEST(PickleWriterTest, PythonReadsWhatItWrites) {
  PickleWriter w;
  w.Dict()
      .Key("ints").List().Int(0).Int(-5).Int(255).Int(70000).Int(int64_t{1} << 40).Int(-(int64_t{1} << 40))
      .UInt(UINT64_MAX).UInt(uint64_t{1} << 63).EndList()
      .Key("flags").List().Bool(true).Bool(false).None().EndList()
      .Key("pair").Tuple().Int(0).Int(0).EndTuple()
      .Key("text").Str("x\xffy \xc3\xa9")
      .Key("empty").Dict().EndDict()
      .EndDict();
  std::string path = test::MakeTempDir() + "/p.pickle";
  test::WriteFile(path, w.Finish());
  test::CommandResult r = test::RunCommand(
      {test::Python(), "-c", "import pickle,sys; d = pickle.load(open(sys.argv[1], 'rb')); print(sorted(d.items()))", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "[('empty', {}), ('flags', [True, False, None]), ('ints', [0, -5, 255, 70000, 1099511627776, "
            "-1099511627776, 18446744073709551615, 9223372036854775808]), ('pair', (0, 0)), ('text', 'x?y \u00e9')]\n");
  test::RemoveTempDir(path.substr(0, path.rfind('/')));
}

// Issue 28, 3: --memory-snapshot of the fake caching allocator's run (blocks
// carved from 2 MiB segments on two devices, cuda:1's freed and given back)
// is the pickle torch.cuda._memory_viz reads: 1.13's flamegraph writers,
// and the 2.x root's segsum, trace, segment_plot and trace_plot. Its trace
// entries count every block and segment call; its segments at the end are
// cuda:0's, tiled by their blocks, as much allocated and reserved as the
// allocator's own totals say.
TEST_F(MemoryTest, SnapshotOpensInMemoryViz) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  if (!test::HaveTorch()) GTEST_SKIP() << "needs python3-torch (torch.cuda._memory_viz)";
  std::string binary = test::TorchprobeBinary();
  std::string storm = binary.substr(0, binary.rfind('/')) + "/fixtures/cudamem/device_storm";
  if (!test::FileExists(storm)) GTEST_SKIP() << "fixtures not built (make test)";
  std::string snapshot = dir_ + "/snap.pickle";
  constexpr int kBlocks = 3000;
  test::CommandResult r = test::RunCommand({binary, "record", "-q", "--memory-snapshot", snapshot, "-o",
                                            dir_ + "/s.pftrace", "--", storm, std::to_string(kBlocks), "tidy"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  uint64_t allocated0 = 0, reserved0 = 0, reserved1 = 0;
  {
    std::istringstream printed(r.out);
    std::string word;
    int device;
    uint64_t allocated, reserved, peak;
    while (printed >> word && word == "device" && printed >> device >> word >> allocated >> word >> reserved >> word >>
                                                      peak >> word >> peak) {
      if (device == 0) allocated0 = allocated, reserved0 = reserved;
      else reserved1 = reserved;
    }
  }
  ASSERT_GT(reserved0, 0u) << r.out;
  std::string script = test::TrainScript();
  script.replace(script.rfind("train.py"), 8, "check_snapshot.py");
  auto check = [&](const std::vector<std::string>& argv, const std::string& html_dir, bool modern) {
    test::CommandResult c = test::RunCommand(argv);
    ASSERT_EQ(c.exit_code, 0) << c.err;
    JsonValue facts;
    std::string error;
    ASSERT_TRUE(ParseJson(c.out, &facts, &error)) << error << ": " << c.out;
    auto count = [&](const char* device, const char* action) -> uint64_t {
      const JsonValue* d = facts.Find("traces") ? facts.Find("traces")->Find(device) : nullptr;
      const JsonValue* n = d ? d->Find(action) : nullptr;
      return n ? static_cast<uint64_t>(n->number) : 0;
    };
    EXPECT_EQ(count("0", "alloc"), kBlocks / 2u);
    EXPECT_EQ(count("1", "alloc"), kBlocks / 2u);
    EXPECT_EQ(count("0", "free_requested"), kBlocks / 6u);  // every third block of cuda:0's every second
    EXPECT_EQ(count("0", "free_completed"), kBlocks / 6u);
    EXPECT_EQ(count("1", "free_requested"), kBlocks / 2u) << "cuda:1's blocks all freed before its segments";
    EXPECT_EQ(count("0", "segment_alloc") * (2u << 20), reserved0);
    EXPECT_EQ(count("1", "segment_alloc") * (2u << 20), reserved1);
    EXPECT_EQ(count("1", "segment_free"), count("1", "segment_alloc"));
    EXPECT_EQ(count("0", "segment_free"), 0u);
    const JsonValue* segments = facts.Find("segments");
    ASSERT_NE(segments, nullptr);
    ASSERT_EQ(segments->members.size(), 1u) << "cuda:1's segments were given back";
    const JsonValue& zero = segments->members[0].second;
    EXPECT_EQ(segments->members[0].first, "0");
    EXPECT_EQ(static_cast<uint64_t>(zero.Find("total")->number), reserved0);
    EXPECT_EQ(static_cast<uint64_t>(zero.Find("active")->number), allocated0);
    std::vector<std::string> ran;
    for (const JsonValue& name : facts.Find("viz")->items) ran.push_back(name.string);
    std::vector<std::string> want = {"segments", "memory"};
    if (modern) want.insert(want.end(), {"segsum", "trace", "segment_plot", "trace_plot"});
    EXPECT_EQ(ran, want);
    ASSERT_NE(facts.Find("outside"), nullptr);
    EXPECT_EQ(facts.Find("outside")->number, 0) << "every live block lies in a live segment";
    if (modern) {
      for (const char* page : {"/segment_plot.html", "/trace_plot.html"})
        EXPECT_GT(test::ReadFile(html_dir + page).size(), test::ReadFile(snapshot).size()) << page;
    }
  };
  {
    SCOPED_TRACE("PyTorch 1.13");
    check({test::Python(), script, snapshot, dir_}, dir_, false);
  }
  {
    // Without `tidy`, cuda:1's segments go back with blocks still in them:
    // those blocks get a segment each, and the pickle says how many.
    std::string untidy = dir_ + "/untidy.pickle";
    r = test::RunCommand({binary, "record", "-q", "--memory-snapshot", untidy, "-o", dir_ + "/u.pftrace", "--", storm,
                          std::to_string(kBlocks)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    test::CommandResult c = test::RunCommand({test::Python(), script, untidy, dir_});
    ASSERT_EQ(c.exit_code, 0) << c.err;
    JsonValue facts;
    std::string error;
    ASSERT_TRUE(ParseJson(c.out, &facts, &error)) << error;
    ASSERT_NE(facts.Find("outside"), nullptr);
    EXPECT_EQ(facts.Find("outside")->number, kBlocks / 2 - kBlocks / 6) << "cuda:1's blocks never freed";
  }
  std::string root = test::Torch2Root();
  if (root.empty()) {
    std::printf("2.x root left out: %s\n", test::Torch2RootMissing().c_str());
    return;
  }
  SCOPED_TRACE("PyTorch 2.x root");
  std::string there = "/tmp/torchprobe-snapshot-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"mkdir", "-p", root + there}).exit_code, 0);
  ASSERT_EQ(test::RunCommand({"cp", script, snapshot, root + there}).exit_code, 0);
  check(test::Torch2Python(root, there + "/check_snapshot.py", {there + "/snap.pickle", there}), root + there, true);
  test::RunCommand({"rm", "-rf", root + there});
}

// Issue 9, 5: the CUDA path, with a fake libc10 whose
// reportMemoryUsageToProfiler a program calls as CUDA's caching allocator
// does: per device, the allocated and reserved counters end and peak where
// the allocator's own totals did, and every block malloc and free is there.
TEST_F(MemoryTest, DeviceCountersFollowTheCachingAllocatorsReports) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  std::string binary = test::TorchprobeBinary();
  std::string storm = binary.substr(0, binary.rfind('/')) + "/fixtures/cudamem/device_storm";
  if (!test::FileExists(storm)) GTEST_SKIP() << "fixtures not built (make test)";
  if (test::TraceProcessor().empty()) GTEST_SKIP() << "no trace_processor_shell";
  std::string out = dir_ + "/d.pftrace";
  constexpr int kBlocks = 3000;  // over 2 MiB a device: two segments each
  test::CommandResult r = test::RunCommand({binary, "record", "-q", "--memory", "-o", out, "--", storm,
                                            std::to_string(kBlocks)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace trace = ReadOrFail(out);
  EXPECT_EQ(trace.stats.device_events, kBlocks + (kBlocks + 2) / 3u);
  size_t segments_at = r.out.find("segments ");
  ASSERT_NE(segments_at, std::string::npos) << r.out;
  std::istringstream printed(r.out.substr(0, segments_at));
  std::string word;
  int device;
  uint64_t allocated, reserved, peak_allocated, peak_reserved;
  int devices = 0;
  uint64_t reserved_of[2] = {0, 0};
  while (printed >> word >> device >> word >> allocated >> word >> reserved >> word >> peak_allocated >> word >>
         peak_reserved) {
    ++devices;
    if (device == 0 || device == 1) reserved_of[device] = peak_reserved;
    std::string name = "cuda:" + std::to_string(device);
    auto values = [&](const std::string& track) {
      return test::QueryTrace(out, "select cast(max(c.value) as int), (select cast(value as int) from counter c2 "
                                   "where c2.track_id = t.id order by ts desc limit 1) from counter c join "
                                   "process_counter_track t on c.track_id = t.id where t.name = '" + track + "'");
    };
    auto a = values(name + " memory allocated"), v = values(name + " memory reserved");
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(a[0].size(), 2u) << a[0].front();
    ASSERT_EQ(v.size(), 1u);
    ASSERT_EQ(v[0].size(), 2u) << v[0].front();
    EXPECT_EQ(std::stoull(a[0][0]), peak_allocated) << name;
    EXPECT_EQ(std::stoull(a[0][1]), allocated) << name;
    EXPECT_EQ(std::stoull(v[0][0]), peak_reserved) << name;
    EXPECT_EQ(std::stoull(v[0][1]), reserved) << name;
    size_t allocs = 0, frees = 0;
    for (const DecodedMemoryEvent& e : trace.memory) {
      if (e.device != name) continue;
      (e.alloc ? allocs : frees) += 1;
    }
    EXPECT_EQ(allocs, kBlocks / 2u) << name;
    EXPECT_EQ(frees, (kBlocks / 2 + 2) / 3u) << name;  // every third block, alternating devices
  }
  EXPECT_EQ(devices, 2) << r.out;
  // Underneath: the segments cudaMalloc'd (2 MiB each, as reserved grew) and
  // cuda:1's given back by cudaFree.
  uint64_t segments = std::stoull(r.out.substr(segments_at + 9));
  auto calls = test::QueryTrace(out, "select name, count(*) from slice where category = 'memory' and name like "
                                     "'cuda%' group by name order by name");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0][0], "cudaFree");
  EXPECT_EQ(calls[1][0], "cudaMalloc");
  EXPECT_EQ(std::stoull(calls[0][1]) * (2u << 20), reserved_of[1]);
  EXPECT_EQ(std::stoull(calls[1][1]) * (2u << 20), reserved_of[0] + reserved_of[1]);
  EXPECT_EQ(trace.stats.segment_events, std::stoull(calls[0][1]) + std::stoull(calls[1][1]));
  auto left = test::QueryTrace(out, "select cast(value as int) from counter c join process_counter_track t on "
                                    "c.track_id = t.id where t.name = 'cudaMalloc bytes' order by c.ts desc limit 1");
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(std::stoull(left[0][0]), segments);
  std::vector<ProcessMemory> memory = SummarizeMemory(trace);
  ASSERT_EQ(memory.size(), 2u);
  EXPECT_EQ(memory[0].device, "cuda:0");
  EXPECT_EQ(memory[1].device, "cuda:1");
}

}  // namespace
}  // namespace torchprobe
