// PerfettoWriter: a synthetic trace (2 processes, 3 threads, nested and
// repaired slices) written to a temp file, then decoded with libprotobuf for
// the wire rules and with our reader for meaning; where Perfetto's own
// trace_processor_shell is available, it must read the same slices with no
// errors. No root needed.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "schemas/perfetto_trace.pb.h"
#include "tests/test_support.h"
#include "userspace/base/atomic_file.h"
#include "userspace/export/perfetto_writer.h"
#include "userspace/export/proto_encoder.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

namespace pb = ::torchprobe::pftrace;
using test::ListDir;
using test::ReadFile;

std::string TempDir() { return test::MakeTempDir(); }

constexpr uint64_t kMono = 4'000'000'000'000;  // CLOCK_MONOTONIC at Begin
constexpr uint64_t kBoot = 5'000'123'456'789;  // CLOCK_BOOTTIME at Begin

OpTable Ops() {
  return {
      {"aten::linear", "", "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"},
      {"aten::addmm", "", "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor"},
      {"aten::mul", "Tensor", "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"},
      {"aten::sum", "dim_IntList", "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"},
      {"aten::empty", "memory_format", "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor"},
      {"aten::_mystery", "", ""},  // unresolved schema
  };
}

struct Tree {
  uint32_t pid, tid;
  std::vector<Slice> slices;
};

Slice S(uint64_t begin, uint64_t end, uint32_t op, uint16_t depth, uint8_t flags = 0) {
  return Slice{kMono + begin, kMono + end, op, depth, flags};
}

std::vector<Tree> Trees() {
  return {
      {100, 100, {S(1000, 2000, 0, 0), S(1100, 1900, 1, 1), S(1200, 1300, 4, 2), S(1950, 1990, 2, 1)}},
      {100, 101, {S(0, 600, 3, 0, kSliceBeginUnseen), S(100, 200, 2, 1)}},
      {100, 100, {S(2100, 2500, 3, 0), S(2200, 2400, 3, 1)}},  // recursion
      {200, 200, {S(3000, 3000, 4, 0), S(3100, 3200, 5, 0)}},  // zero length, unresolved
      {100, 101, {S(5000, 9000, 2, 0, kSliceEndUnseen)}},
      {100, 101, {S(9100, 9200, 1, 0, kSliceUnwound)}},
  };
}

TraceStats Stats() {
  TraceStats s;
  s.events = 24;
  s.dropped_events = 3;
  s.unknown_events = 1;
  s.begin_repaired = 1;
  s.end_repaired = 1;
  s.mismatched_exits = 2;
  s.before_start = 9;
  s.after_stop = 6;
  s.unwound = 4;
  s.probed_symbols = 2000;
  s.unresolved_symbols = 7;
  s.without_returns = 5;
  s.catch_probes = 1;
  s.attach_mode = "uprobe_multi";
  s.attach_ns = 12'345'678;
  s.detach_ns = 2'345'678;
  s.op_slices = 16;
  s.op_time_ns = 9'876;
  s.probe_ns_per_op = 1'234;
  s.probe_ns_uretprobe = 1'234;
  s.probe_ns_ret = 11'200;
  s.probe_ns_calibration = 31'000'000;
  return s;
}

void WriteSynthetic(const std::string& path) {
  std::string error;
  auto writer = PerfettoWriter::Open(path, &error);
  ASSERT_NE(writer, nullptr) << error;
  writer->Begin(Ops(), ClockSnapshot{kBoot, kMono});
  writer->AddProcess({100, "python3", "python3 train.py --steps 2"});
  writer->AddThread({100, 100, "python3"});
  writer->AddThread({100, 101, "pt_autograd_0"});
  writer->AddProcess({200, "worker", "worker --rank 1"});
  writer->AddThread({200, 200, "worker"});
  for (const Tree& t : Trees()) writer->AddSliceTree(t.pid, t.tid, t.slices);
  ASSERT_TRUE(writer->Finish(Stats(), &error)) << error;
}

class PerfettoWriterTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    path_ = dir_ + "/synthetic.pftrace";
    WriteSynthetic(path_);
  }
  void TearDown() override {
    for (const std::string& n : ListDir(dir_)) unlink((dir_ + "/" + n).c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

TEST(ProtoEncoderTest, MatchesLibprotobuf) {
  ProtoEncoder enc;
  size_t packet = enc.BeginNested(1);
  enc.Varint(8, 1ull << 40);
  enc.Varint(10, 7);
  size_t event = enc.BeginNested(11);
  enc.Varint(9, 1);
  enc.String(23, std::string(300, 'x'));  // forces a long nested length
  enc.Fixed64(47, 0x0123456789abcdefull);
  enc.EndNested(event);
  enc.EndNested(packet);
  pb::Trace trace;
  ASSERT_TRUE(trace.ParseFromArray(enc.data(), static_cast<int>(enc.size())));
  ASSERT_EQ(trace.packet_size(), 1);
  const pb::TracePacket& p = trace.packet(0);
  EXPECT_EQ(p.timestamp(), 1ull << 40);
  EXPECT_EQ(p.trusted_packet_sequence_id(), 7u);
  EXPECT_EQ(p.track_event().type(), pb::TrackEvent::TYPE_SLICE_BEGIN);
  EXPECT_EQ(p.track_event().name(), std::string(300, 'x'));
  ASSERT_EQ(p.track_event().flow_ids_size(), 1);
  EXPECT_EQ(p.track_event().flow_ids(0), 0x0123456789abcdefull);
  EXPECT_EQ(enc.size(), static_cast<size_t>(trace.ByteSizeLong()));
}

TEST(AtomicFileTest, CommitRenamesAbortRemoves) {
  std::string dir = TempDir();
  std::string error;
  {
    auto file = AtomicFile::Open(dir + "/a.bin", &error);
    ASSERT_NE(file, nullptr) << error;
    std::string big(3 << 20, 'z');  // larger than the buffer
    EXPECT_TRUE(file->Write("abc", 3));
    EXPECT_TRUE(file->Write(big.data(), big.size()));
    // Unnamed (O_TMPFILE) until Commit: a killed writer leaves nothing.
    EXPECT_TRUE(ListDir(dir).empty());
    EXPECT_EQ(access((dir + "/a.bin").c_str(), F_OK), -1);
    ASSERT_TRUE(file->Commit(&error)) << error;
  }
  EXPECT_EQ(ReadFile(dir + "/a.bin").size(), 3u + (3 << 20));
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"a.bin"});  // no temp name left
  {
    auto file = AtomicFile::Open(dir + "/a.bin", &error);  // replaces atomically
    ASSERT_NE(file, nullptr) << error;
    EXPECT_TRUE(file->Write("new", 3));
    EXPECT_EQ(ReadFile(dir + "/a.bin").size(), 3u + (3 << 20));  // old until Commit
    ASSERT_TRUE(file->Commit(&error)) << error;
  }
  EXPECT_EQ(ReadFile(dir + "/a.bin"), "new");
  {
    auto file = AtomicFile::Open(dir + "/b.bin", &error);
    ASSERT_NE(file, nullptr);
    file->Write("x", 1);
  }  // destroyed without Commit
  EXPECT_EQ(ListDir(dir), std::vector<std::string>{"a.bin"});
  unlink((dir + "/a.bin").c_str());
  rmdir(dir.c_str());
}

TEST(AtomicFileTest, OpenFailsEarlyWithOneLine) {
  std::string error;
  EXPECT_EQ(AtomicFile::Open("/nonexistent-dir/x.pftrace", &error), nullptr);
  EXPECT_EQ(error, "cannot write /nonexistent-dir/x.pftrace: No such file or directory");
  EXPECT_EQ(PerfettoWriter::Open("/tmp", &error), nullptr);
  EXPECT_EQ(error, "cannot write /tmp: Is a directory");
  if (geteuid() != 0) {
    std::string dir = TempDir();
    chmod(dir.c_str(), 0500);
    EXPECT_EQ(AtomicFile::Open(dir + "/x.pftrace", &error), nullptr);
    EXPECT_EQ(error, "cannot write " + dir + "/x.pftrace: Permission denied");
    rmdir(dir.c_str());
  }
}

TEST(PerfettoWriterAbortTest, NoFileWithoutFinish) {
  std::string dir = TempDir();
  std::string error;
  {
    auto writer = PerfettoWriter::Open(dir + "/t.pftrace", &error);
    ASSERT_NE(writer, nullptr);
    writer->Begin(Ops(), ClockSnapshot{kBoot, kMono});
    writer->AddThread({1, 1, "t"});
    writer->AddSliceTree(1, 1, {S(0, 10, 0, 0)});
  }
  EXPECT_TRUE(ListDir(dir).empty());
  rmdir(dir.c_str());
}

// The wire rules trace_processor silently enforces (FORMATS.md section 1).
TEST_F(PerfettoWriterTest, FollowsSequenceAndInterningRules) {
  pb::Trace trace;
  ASSERT_TRUE(trace.ParseFromString(ReadFile(path_)));
  ASSERT_GT(trace.packet_size(), 0);
  const pb::TracePacket& first = trace.packet(0);
  ASSERT_TRUE(first.has_clock_snapshot());
  std::map<uint32_t, uint64_t> clocks;
  for (const auto& c : first.clock_snapshot().clocks()) clocks[c.clock_id()] = c.timestamp();
  EXPECT_EQ(clocks[6], kBoot);
  EXPECT_EQ(clocks[3], kMono);
  EXPECT_EQ(first.clock_snapshot().primary_trace_clock(), pb::BUILTIN_CLOCK_BOOTTIME);

  std::set<uint32_t> seen_sequences;
  std::map<uint32_t, std::set<uint64_t>> names;  // defined iids per sequence
  std::map<uint32_t, std::set<uint64_t>> strings;
  std::set<uint64_t> described;
  for (const pb::TracePacket& p : trace.packet()) {
    uint32_t seq = p.trusted_packet_sequence_id();
    EXPECT_NE(seq, 0u);
    if (seen_sequences.insert(seq).second) {  // first packet of its sequence
      EXPECT_TRUE(p.sequence_flags() & pb::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
    }
    for (const auto& n : p.interned_data().event_names()) names[seq].insert(n.iid());
    for (const auto& n : p.interned_data().debug_annotation_string_values()) strings[seq].insert(n.iid());
    if (p.has_track_descriptor()) {
      EXPECT_TRUE(described.insert(p.track_descriptor().uuid()).second) << "described twice";
      if (p.track_descriptor().has_thread()) {
        EXPECT_TRUE(described.count(p.track_descriptor().parent_uuid()));
      }
    }
    if (!p.has_track_event()) continue;
    const pb::TrackEvent& e = p.track_event();
    // Iids and defaults are used without SEQ_NEEDS_INCREMENTAL_STATE: the
    // state is valid from the sequence's first packet (checked above) on, and
    // the flag only makes a reader skip packets after some were lost.
    if (e.has_name_iid()) {
      EXPECT_TRUE(names[seq].count(e.name_iid())) << "iid used before its definition";
    }
    for (const auto& a : e.debug_annotations()) {
      if (a.has_string_value_iid()) {
        EXPECT_TRUE(strings[seq].count(a.string_value_iid()));
      }
    }
  }
  EXPECT_EQ(seen_sequences.size(), 4u);  // global + one per thread
}

TEST_F(PerfettoWriterTest, DecodesToWhatWasWritten) {
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(path_, &trace, &error)) << error;
  EXPECT_EQ(trace.unmatched_ends, 0u);
  EXPECT_EQ(trace.unterminated, 0u);
  ASSERT_TRUE(trace.has_clock_snapshot);
  EXPECT_EQ(trace.clock.boottime_ns, kBoot);

  ASSERT_EQ(trace.processes.size(), 2u);
  EXPECT_EQ(trace.processes[0].pid, 100u);
  EXPECT_EQ(trace.processes[0].name, "python3");
  EXPECT_EQ(trace.processes[0].cmdline, "python3 train.py --steps 2");
  EXPECT_EQ(trace.processes[1].pid, 200u);
  ASSERT_EQ(trace.threads.size(), 3u);

  // Expected per thread: the trees' slices in order, depth from the input.
  std::map<std::pair<uint32_t, uint32_t>, std::vector<Slice>> expected;
  for (const Tree& t : Trees()) {
    auto& v = expected[{t.pid, t.tid}];
    v.insert(v.end(), t.slices.begin(), t.slices.end());
  }
  OpTable ops = Ops();
  size_t total = 0;
  for (const auto& [key, slices] : expected) {
    const DecodedThread* thread = trace.FindThread(key.first, key.second);
    ASSERT_NE(thread, nullptr) << key.second;
    ASSERT_EQ(thread->slices.size(), slices.size()) << key.second;
    total += slices.size();
    for (size_t i = 0; i < slices.size(); ++i) {
      const DecodedSlice& got = thread->slices[i];
      const Slice& want = slices[i];
      SCOPED_TRACE("tid " + std::to_string(key.second) + " slice " + std::to_string(i));
      EXPECT_EQ(got.begin_ns, want.begin_ns);
      EXPECT_EQ(got.end_ns, want.end_ns);
      EXPECT_EQ(got.depth, want.depth);
      EXPECT_EQ(trace.ops[got.op].name, ops[want.op_id].name);
      EXPECT_EQ(trace.ops[got.op].overload, ops[want.op_id].overload);
      EXPECT_EQ(trace.ops[got.op].schema, ops[want.op_id].schema);
      EXPECT_EQ(got.repaired_begin, (want.flags & kSliceBeginUnseen) != 0);
      EXPECT_EQ(got.repaired_end, (want.flags & kSliceEndUnseen) != 0);
      EXPECT_EQ(got.unwound, (want.flags & kSliceUnwound) != 0);
      if (want.depth > 0) {
        ASSERT_GE(got.parent, 0);
        EXPECT_EQ(thread->slices[got.parent].depth + 1, want.depth);
        EXPECT_LE(thread->slices[got.parent].begin_ns, got.begin_ns);
        EXPECT_GE(thread->slices[got.parent].end_ns, got.end_ns);
      } else {
        EXPECT_EQ(got.parent, -1);
      }
    }
  }
  EXPECT_EQ(trace.slice_count(), total);
  EXPECT_EQ(trace.FindThread(100, 101)->name, "pt_autograd_0");

  ASSERT_TRUE(trace.has_stats);
  TraceStats want = Stats();
  const TraceStats& got = trace.stats;
  EXPECT_EQ(got.events, want.events);
  EXPECT_EQ(got.dropped_events, want.dropped_events);
  EXPECT_EQ(got.unknown_events, want.unknown_events);
  EXPECT_EQ(got.begin_repaired, want.begin_repaired);
  EXPECT_EQ(got.end_repaired, want.end_repaired);
  EXPECT_EQ(got.mismatched_exits, want.mismatched_exits);
  EXPECT_EQ(got.before_start, want.before_start);
  EXPECT_EQ(got.after_stop, want.after_stop);
  EXPECT_EQ(got.unwound, want.unwound);
  EXPECT_EQ(got.without_returns, want.without_returns);
  EXPECT_EQ(got.catch_probes, want.catch_probes);
  EXPECT_EQ(got.probed_symbols, want.probed_symbols);
  EXPECT_EQ(got.unresolved_symbols, want.unresolved_symbols);
  EXPECT_EQ(got.attach_mode, want.attach_mode);
  EXPECT_EQ(got.attach_ns, want.attach_ns);
  EXPECT_EQ(got.detach_ns, want.detach_ns);
  // Every numeric field, those above and any added since.
  for (const StatsField& field : kStatsFields) EXPECT_EQ(got.*field.value, want.*field.value) << field.name;
}

// Input that does not nest (a child past its parent, overlapping siblings)
// is clamped so the track still nests: nothing for trace_processor to cut.
TEST(PerfettoWriterClampTest, KeepsTracksNested) {
  std::string dir = TempDir();
  std::string path = dir + "/clamp.pftrace", error;
  {
    auto writer = PerfettoWriter::Open(path, &error);
    ASSERT_NE(writer, nullptr);
    writer->Begin(Ops(), ClockSnapshot{kBoot, kMono});
    writer->AddProcess({1, "p", ""});
    writer->AddThread({1, 1, "t"});
    writer->AddSliceTree(1, 1, {S(100, 200, 0, 0), S(150, 300, 1, 1), S(120, 180, 2, 1),
                                S(190, 195, 99, 1)});  // op id outside the table
    ASSERT_TRUE(writer->Finish(TraceStats{}, &error)) << error;
  }
  DecodedTrace trace;
  ASSERT_TRUE(ReadTrace(path, &trace, &error)) << error;
  const DecodedThread* t = trace.FindThread(1, 1);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->slices.size(), 4u);
  EXPECT_EQ(t->slices[1].end_ns, kMono + 200);    // clamped to the parent
  EXPECT_EQ(t->slices[2].begin_ns, kMono + 200);  // not before its sibling's end
  EXPECT_EQ(trace.ops[t->slices[3].op].name, "[unknown op 99]");
  for (const DecodedSlice& s : t->slices) EXPECT_LE(s.begin_ns, s.end_ns);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

// ---- Perfetto's own reader --------------------------------------------------

TEST_F(PerfettoWriterTest, TraceProcessorReadsItCleanly) {
  if (test::TraceProcessor().empty()) GTEST_SKIP() << "no trace_processor_shell (set TRACE_PROCESSOR)";

  auto errors = test::QueryTrace(path_,
                      "select name, idx, severity, value from stats where value > 0 and "
                      "(severity = 'error' or severity = 'data_loss')");
  for (const auto& row : errors) ADD_FAILURE() << "trace_processor stat: " << row[0] << " = " << row[3];

  auto unfinished = test::QueryTrace(path_, "select count(*) from slice where dur = -1");
  ASSERT_EQ(unfinished.size(), 1u);
  EXPECT_EQ(unfinished[0][0], "0");

  // Every op slice, on its thread, at BOOTTIME = MONOTONIC + (boot - mono).
  auto rows = test::QueryTrace(path_,
                    "select t.tid, s.ts, s.dur, s.depth, s.name from slice s "
                    "join thread_track tt on s.track_id = tt.id join thread t using(utid) "
                    "order by t.tid, s.ts, s.depth");
  std::map<uint32_t, std::vector<Slice>> expected;
  for (const Tree& t : Trees()) {
    auto& v = expected[t.tid];
    v.insert(v.end(), t.slices.begin(), t.slices.end());
  }
  std::vector<std::vector<std::string>> want;
  OpTable ops = Ops();
  for (auto& [tid, slices] : expected) {
    std::stable_sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
      return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.depth < b.depth;
    });
    for (const Slice& s : slices) {
      want.push_back({std::to_string(tid), std::to_string(s.begin_ns - kMono + kBoot),
                      std::to_string(s.end_ns - s.begin_ns), std::to_string(s.depth),
                      ops[s.op_id].name});
    }
  }
  EXPECT_EQ(rows, want);

  auto threads = test::QueryTrace(path_,
                       "select t.tid, t.name, p.pid, p.name from thread t join process p using(upid) "
                       "where t.tid in (100, 101, 200) order by t.tid");
  std::vector<std::vector<std::string>> want_threads = {
      {"100", "python3", "100", "python3"},
      {"101", "pt_autograd_0", "100", "python3"},
      {"200", "worker", "200", "worker"}};
  EXPECT_EQ(threads, want_threads);

  auto args = test::QueryTrace(path_,
                    "select a.key, a.display_value from slice s join args a using(arg_set_id) "
                    "where s.name = 'aten::mul' and s.depth = 1 and s.ts = " +
                        std::to_string(kBoot + 1950) + " order by a.key");
  std::vector<std::vector<std::string>> want_args = {
      {"debug.overload", "Tensor"},
      {"debug.schema", "aten::mul.Tensor(Tensor self"}};  // CSV split at the comma
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[0], want_args[0]);
  EXPECT_EQ(args[1][0], "debug.schema");

  auto repaired = test::QueryTrace(path_,
                        "select s.name, a.key, a.display_value from slice s join args a using(arg_set_id) "
                        "where a.key like 'debug.repaired%' order by s.ts");
  std::vector<std::vector<std::string>> want_repaired = {
      {"aten::sum", "debug.repaired_begin", "true"}, {"aten::mul", "debug.repaired_end", "true"}};
  EXPECT_EQ(repaired, want_repaired);
  auto unwound = test::QueryTrace(path_,
                       "select s.name, a.display_value from slice s join args a using(arg_set_id) "
                       "where a.key = 'debug.unwound'");
  EXPECT_EQ(unwound, (std::vector<std::vector<std::string>>{{"aten::addmm", "true"}}));

  auto stats = test::QueryTrace(path_,
                     "select a.key, a.display_value from slice s join args a using(arg_set_id) "
                     "where s.name = 'torchprobe' and a.key like 'debug.torchprobe.%' order by a.key");
  std::map<std::string, std::string> got;
  for (const auto& row : stats) got[row[0]] = row[1];
  EXPECT_EQ(got["debug.torchprobe.dropped_events"], "3");
  EXPECT_EQ(got["debug.torchprobe.unresolved_symbols"], "7");
  EXPECT_EQ(got["debug.torchprobe.attach_mode"], "uprobe_multi");
  EXPECT_EQ(got["debug.torchprobe.detach_ns"], "2345678");
  EXPECT_EQ(got["debug.torchprobe.before_start"], "9");
  EXPECT_EQ(got["debug.torchprobe.unwound"], "4");
  EXPECT_EQ(got["debug.torchprobe.without_returns"], "5");
  EXPECT_EQ(got["debug.torchprobe.after_stop"], "6");
  EXPECT_EQ(got.size(), std::size(kStatsFields) + 1);  // every TraceStats field, and attach_mode
}

}  // namespace
}  // namespace torchprobe
