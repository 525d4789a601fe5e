// `torchprobe report`: one-line errors for files that are not traces, what
// is kept of a cut-off trace, the overview of processes and threads, and the
// key_averages()-style table's numbers on known traces.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "userspace/export/perfetto_writer.h"
#include "userspace/report/op_summary.h"
#include "userspace/report/report.h"
#include "userspace/report/text_format.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

constexpr uint64_t kMono = 1'000'000'000;

class ReportTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "report_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override {
    for (const std::string& f : files_) unlink(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string Path(const std::string& name) {
    files_.push_back(dir_ + "/" + name);
    return files_.back();
  }
  void WriteBytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  std::string ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Thread 1: linear [0,1000] { addmm [100,700] { empty [200,300] }, mul [800,900] }
  // Thread 2: mul.Scalar [0,500]  (same name, other overload: one row)
  void WriteKnown(const std::string& path) {
    std::string error;
    auto writer = PerfettoWriter::Open(path, &error);
    ASSERT_NE(writer, nullptr) << error;
    writer->Begin({{"aten::linear", "", "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"},
                   {"aten::addmm", "", "aten::addmm(...) -> Tensor"},
                   {"aten::empty", "memory_format", "aten::empty.memory_format(...) -> Tensor"},
                   {"aten::mul", "Tensor", "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"},
                   {"aten::mul", "Scalar", "aten::mul.Scalar(Tensor self, Scalar other) -> Tensor"}},
                  ClockSnapshot{kMono + 77, kMono});
    writer->AddProcess({10, "python3", "python3 x.py"});
    writer->AddThread({10, 10, "python3"});
    writer->AddThread({10, 11, "worker"});
    writer->AddSliceTree(10, 10, {{kMono + 0, kMono + 1000, 0, 0, 0}, {kMono + 100, kMono + 700, 1, 1, 0},
                                  {kMono + 200, kMono + 300, 2, 2, 0}, {kMono + 800, kMono + 900, 3, 1, 0}});
    writer->AddSliceTree(10, 11, {{kMono + 0, kMono + 500, 4, 0, kSliceEndUnseen}});
    TraceStats stats;
    stats.events = 9;
    stats.dropped_events = 2;
    stats.end_repaired = 1;
    stats.probed_symbols = 1500;
    stats.unresolved_symbols = 12;
    stats.attach_mode = "uprobe";
    stats.attach_ns = 250'000'000;
    stats.detach_ns = 3'000'000;
    ASSERT_TRUE(writer->Finish(stats, &error)) << error;
  }
  // pid 20 "trainer" (long command line with a newline): threads 100..110,
  //   thread 100+k running k+1 aten::add slices;
  // pid 30 "worker": thread 30 running 2 aten::mul slices;
  // thread 40/41 "orphan" with 1 aten::add slice, and no process descriptor.
  void WriteProcesses(const std::string& path) {
    std::string error;
    auto writer = PerfettoWriter::Open(path, &error);
    ASSERT_NE(writer, nullptr) << error;
    writer->Begin({{"aten::add", "Tensor", "aten::add.Tensor(...) -> Tensor"},
                   {"aten::mul", "Tensor", "aten::mul.Tensor(...) -> Tensor"}},
                  ClockSnapshot{kMono, kMono});
    writer->AddProcess(
        {20, "trainer", "python3 -c 'import torch\nprint(1)' " + std::string(150, 'x')});
    writer->AddProcess({30, "worker", "python3 worker.py"});
    for (uint32_t k = 0; k <= 10; ++k) {
      writer->AddThread({20, 100 + k, "t" + std::to_string(k)});
      for (uint32_t i = 0; i <= k; ++i) {
        writer->AddSliceTree(20, 100 + k, {{kMono + i * 10, kMono + i * 10 + 5, 0, 0, 0}});
      }
    }
    writer->AddThread({30, 30, "worker"});
    writer->AddSliceTree(30, 30, {{kMono + 1000, kMono + 1100, 1, 0, 0}});
    writer->AddSliceTree(30, 30, {{kMono + 2000, kMono + 2100, 1, 0, 0}});
    writer->AddThread({40, 41, "orphan"});
    writer->AddSliceTree(40, 41, {{kMono + 50, kMono + 60, 0, 0, 0}});
    ASSERT_TRUE(writer->Finish(TraceStats{}, &error)) << error;
  }
  // Where each packet of `bytes` starts (`0x0A varint-length packet`), and the
  // end of the last one.
  static std::vector<size_t> PacketBoundaries(const std::string& bytes) {
    std::vector<size_t> starts = {0};
    size_t at = 0;
    while (at < bytes.size()) {
      EXPECT_EQ(bytes[at], 0x0A);
      uint64_t length = 0;
      for (int shift = 0;; shift += 7) {
        unsigned char c = static_cast<unsigned char>(bytes[++at]);
        length |= static_cast<uint64_t>(c & 0x7f) << shift;
        if (!(c & 0x80)) break;
      }
      at += 1 + length;
      starts.push_back(at);
    }
    EXPECT_EQ(at, bytes.size());
    return starts;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(ReportTest, MissingFile) {
  std::string path = dir_ + "/nope.pftrace", error;
  std::ostringstream out;
  EXPECT_FALSE(Report(path, {}, out, &error));
  EXPECT_EQ(error, "cannot open " + path + ": No such file or directory");
  EXPECT_TRUE(out.str().empty());
}

TEST_F(ReportTest, EmptyFile) {
  std::string path = Path("empty.pftrace"), error;
  WriteBytes(path, "");
  std::ostringstream out;
  EXPECT_FALSE(Report(path, {}, out, &error));
  EXPECT_EQ(error, path + ": empty file, not a trace");
}

TEST_F(ReportTest, NotATrace) {
  std::string path = Path("notes.txt"), error;
  WriteBytes(path, "hello, this is text\n");
  std::ostringstream out;
  EXPECT_FALSE(Report(path, {}, out, &error));
  EXPECT_EQ(error, path + ": not a Perfetto trace (byte 0 is 0x68)");

  WriteBytes(path, std::string("\x0a\x02\xff\xff", 4));  // a packet that does not parse
  EXPECT_FALSE(Report(path, {}, out, &error));
  EXPECT_EQ(error, path + ": packet at byte 0 (2 bytes) does not parse: not a Perfetto trace");
}

// Cut anywhere after its first packet, a trace reads up to the cut, as
// trace_processor reads it: every complete packet, and the slices whose begin
// came before the cut, open ones counted unterminated.
TEST_F(ReportTest, TruncatedTraceKeepsCompletePackets) {
  std::string good = Path("good.pftrace"), cut = Path("cut.pftrace"), error;
  WriteKnown(good);
  DecodedTrace full;
  ASSERT_TRUE(ReadTrace(good, &full, &error)) << error;
  EXPECT_FALSE(full.truncated);
  std::string bytes = ReadBytes(good);
  EXPECT_EQ(full.file_size, bytes.size());
  std::vector<size_t> boundaries = PacketBoundaries(bytes);
  ASSERT_GT(boundaries.size(), 10u);

  size_t last_slices = 0;
  size_t truncated_cuts = 0;
  for (size_t size = boundaries[1]; size < bytes.size(); ++size) {
    SCOPED_TRACE("cut at " + std::to_string(size) + " of " + std::to_string(bytes.size()));
    WriteBytes(cut, bytes.substr(0, size));
    DecodedTrace trace;
    ASSERT_TRUE(ReadTrace(cut, &trace, &error)) << error;
    // Complete: the packets that end at or before the cut.
    size_t packets =
        std::upper_bound(boundaries.begin(), boundaries.end(), size) - boundaries.begin() - 1;
    bool mid_packet = boundaries[packets] != size;
    EXPECT_EQ(trace.truncated, mid_packet);
    EXPECT_EQ(trace.truncated_at, mid_packet ? boundaries[packets] : 0u);
    EXPECT_EQ(trace.file_size, size);
    EXPECT_EQ(trace.packets, packets);
    EXPECT_FALSE(trace.has_stats);  // the last packet
    truncated_cuts += mid_packet;

    // Every slice read is the full trace's slice, ended ones with their end.
    size_t slices = 0, open = 0;
    for (const DecodedThread& t : trace.threads) {
      const DecodedThread* whole = full.FindThread(t.pid, t.tid);
      ASSERT_NE(whole, nullptr);
      ASSERT_LE(t.slices.size(), whole->slices.size());
      for (size_t i = 0; i < t.slices.size(); ++i) {
        const DecodedSlice& s = t.slices[i];
        EXPECT_EQ(s.begin_ns, whole->slices[i].begin_ns);
        EXPECT_EQ(trace.ops[s.op].name, full.ops[whole->slices[i].op].name);
        EXPECT_EQ(s.parent, whole->slices[i].parent);
        if (s.ended) {
          EXPECT_EQ(s.end_ns, whole->slices[i].end_ns);
        }
        EXPECT_GE(s.end_ns, s.begin_ns);
        open += !s.ended;
      }
      slices += t.slices.size();
    }
    EXPECT_EQ(trace.unterminated, open);
    EXPECT_GE(slices, last_slices);
    last_slices = slices;
  }
  EXPECT_GT(truncated_cuts, bytes.size() / 2);
  EXPECT_EQ(last_slices, full.slice_count());  // cut inside the stats packet

  // Cut in thread 1's slices: linear and addmm began, addmm did not end.
  std::string text;
  for (size_t size = boundaries[1]; size < bytes.size(); ++size) {
    WriteBytes(cut, bytes.substr(0, size));
    DecodedTrace trace;
    ASSERT_TRUE(ReadTrace(cut, &trace, &error)) << error;
    const DecodedThread* t = trace.FindThread(10, 10);
    if (t == nullptr || t->slices.size() != 2 || t->slices[1].ended || !trace.truncated) continue;
    EXPECT_EQ(trace.unterminated, 2u);
    EXPECT_FALSE(t->slices[0].ended);
    EXPECT_EQ(t->slices[1].end_ns, t->slices[1].begin_ns);  // the thread's last time
    std::ostringstream out;
    PrintReport(trace, out);
    text = out.str();
    break;
  }
  ASSERT_FALSE(text.empty()) << "no cut left linear and addmm open";
  EXPECT_NE(text.find("  unterminated slices 2 (open at the cut: timed up to their thread's last "
                      "event)\n"),
            std::string::npos)
      << text;
}

TEST_F(ReportTest, TruncatedTraceReportWarnsFirst) {
  std::string good = Path("good.pftrace"), cut = Path("cut.pftrace"), error;
  WriteKnown(good);
  std::string bytes = ReadBytes(good);
  std::vector<size_t> boundaries = PacketBoundaries(bytes);
  size_t stats_packet = boundaries[boundaries.size() - 2];
  WriteBytes(cut, bytes.substr(0, bytes.size() - 5));  // inside the stats packet

  std::ostringstream out;
  ASSERT_TRUE(Report(cut, {}, out, &error)) << error;
  std::string text = out.str();
  EXPECT_EQ(text.rfind("warning: trace truncated at byte " + std::to_string(stats_packet) + " of " +
                           std::to_string(bytes.size() - 5) +
                           " (the writer did not finish): showing the " +
                           std::to_string(boundaries.size() - 2) + " complete packets before it\n",
                       0),
            0u)
      << text;
  // Every slice was whole before the stats: the table is the full one.
  EXPECT_NE(text.find("Traced: 1 process, 2 threads, 5 op slices\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Self CPU time total: 1.500us\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  stats               missing: the file is cut at byte " +
                      std::to_string(stats_packet) +
                      ", before the torchprobe stats record (its last packet); drops, repairs "
                      "and attach times are unknown\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("dropped events"), std::string::npos) << text;
  EXPECT_EQ(text.find("unterminated"), std::string::npos) << text;

  // A whole trace has no warning.
  std::ostringstream whole;
  ASSERT_TRUE(Report(good, {}, whole, &error)) << error;
  EXPECT_EQ(whole.str().find("warning"), std::string::npos);
}

// Without one complete packet there is nothing to show: still an error.
TEST_F(ReportTest, TraceCutInsideItsFirstPacket) {
  std::string good = Path("good.pftrace"), cut = Path("cut.pftrace"), error;
  WriteKnown(good);
  std::string bytes = ReadBytes(good);
  size_t first_packet = PacketBoundaries(bytes)[1];
  ASSERT_LT(first_packet, 2u + 128u);  // its length is one byte
  for (size_t size = 1; size < first_packet; ++size) {
    WriteBytes(cut, bytes.substr(0, size));
    DecodedTrace trace;
    EXPECT_FALSE(ReadTrace(cut, &trace, &error)) << size;
    EXPECT_EQ(error.rfind(cut + ": truncated at byte 0 (", 0), 0u) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos);
  }
  WriteBytes(cut, bytes.substr(0, 1));  // the length itself is missing
  std::ostringstream out;
  EXPECT_FALSE(Report(cut, {}, out, &error));
  EXPECT_EQ(error, cut + ": truncated at byte 0 (packet length cut off, 1 bytes left)");
  EXPECT_TRUE(out.str().empty());
  WriteBytes(cut, bytes.substr(0, first_packet - 1));
  EXPECT_FALSE(Report(cut, {}, out, &error));
  EXPECT_EQ(error, cut + ": truncated at byte 0 (packet of " + std::to_string(first_packet - 2) +
                       " bytes, " + std::to_string(first_packet - 3) + " left)");
}

TEST_F(ReportTest, SelfAndTotalTimes) {
  std::string path = Path("known.pftrace"), error;
  WriteKnown(path);
  DecodedTrace trace;
  ASSERT_TRUE(ReadTrace(path, &trace, &error)) << error;
  std::vector<OpSummary> rows = Summarize(trace);
  ASSERT_EQ(rows.size(), 4u);
  // mul: 100 + 500 self; addmm: 600 - 100; linear: 1000 - 600 - 100; empty: 100.
  EXPECT_EQ(rows[0].name, "aten::mul");
  EXPECT_EQ(rows[0].calls, 2u);
  EXPECT_EQ(rows[0].self_ns, 600u);
  EXPECT_EQ(rows[0].total_ns, 600u);
  EXPECT_EQ(rows[1].name, "aten::addmm");
  EXPECT_EQ(rows[1].self_ns, 500u);
  EXPECT_EQ(rows[1].total_ns, 600u);
  EXPECT_EQ(rows[2].name, "aten::linear");
  EXPECT_EQ(rows[2].self_ns, 300u);
  EXPECT_EQ(rows[2].total_ns, 1000u);
  EXPECT_EQ(rows[3].name, "aten::empty");
  EXPECT_EQ(rows[3].self_ns, 100u);
  EXPECT_EQ(rows[3].calls, 1u);

  std::ostringstream out;
  ASSERT_TRUE(Report(path, {}, out, &error)) << error;
  std::string text = out.str();
  // Self CPU total = 1500 ns: mul is 40%, linear's total is 66.67%.
  EXPECT_NE(text.find("   Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls  "),
            std::string::npos) << text;
  EXPECT_NE(text.find("       aten::mul        40.00%       0.600us        40.00%       0.600us       0.300us             2  "),
            std::string::npos) << text;
  EXPECT_NE(text.find("    aten::linear        20.00%       0.300us        66.67%       1.000us       1.000us             1  "),
            std::string::npos) << text;
  EXPECT_NE(text.find("Self CPU time total: 1.500us\n"), std::string::npos) << text;
  EXPECT_LT(text.find("aten::mul"), text.find("aten::addmm"));
  EXPECT_NE(text.find("What was not seen"), std::string::npos);
  EXPECT_NE(text.find("dropped events      2 of 11 op events"), std::string::npos) << text;
  EXPECT_NE(text.find("repaired ends       1"), std::string::npos) << text;
  EXPECT_NE(text.find("unresolved symbols  12 of 1500 probed"), std::string::npos) << text;
  EXPECT_NE(text.find("attach              uprobe: attach 250.000ms, detach 3.000ms"), std::string::npos)
      << text;

  EXPECT_EQ(text.find("not shown"), std::string::npos) << text;

  std::ostringstream top2;
  PrintReport(trace, top2, {2});
  EXPECT_EQ(top2.str().find("aten::linear"), std::string::npos);
  EXPECT_NE(top2.str().find("Self CPU time total: 1.500us"), std::string::npos);  // over all ops
  // linear (300) and empty (100) of 1500 ns are left out, right under the table.
  EXPECT_NE(top2.str().find("  \n... 2 more ops not shown (26.67% of self time): --top N shows "
                            "more\nSelf CPU time total: 1.500us\n"),
            std::string::npos)
      << top2.str();
  std::ostringstream top3;
  PrintReport(trace, top3, {3});
  EXPECT_NE(top3.str().find("... 1 more op not shown (6.67% of self time)"), std::string::npos)
      << top3.str();
}

TEST_F(ReportTest, SaysWhoWasTracedAndWhen) {
  std::string path = Path("known.pftrace"), error;
  WriteKnown(path);
  std::ostringstream out;
  ASSERT_TRUE(Report(path, {}, out, &error)) << error;
  std::string text = out.str();
  EXPECT_EQ(text.rfind("Traced: 1 process, 2 threads, 5 op slices\n"
                       "  pid 10  python3  2 threads  5 op slices  python3 x.py\n"
                       "    threads: 10 python3: 4, 11 worker: 1\n"
                       "Span: 1.000s -> 1.000s (CLOCK_MONOTONIC): 1.000us\n"
                       "\n-----",
                       0),
            0u)
      << text;
}

TEST_F(ReportTest, OverviewCapsThreadsAndCutsCommandLines) {
  std::string path = Path("procs.pftrace"), error;
  WriteProcesses(path);
  std::ostringstream out;
  ASSERT_TRUE(Report(path, {}, out, &error)) << error;
  std::string text = out.str();
  EXPECT_NE(text.find("Traced: 3 processes, 13 threads, 69 op slices\n"), std::string::npos)
      << text;
  // Aligned columns; the newline in argv is a space; the line stays short.
  size_t line = text.find(
      "  pid 20  trainer  11 threads  66 op slices  python3 -c 'import torch print(1)' xxx");
  ASSERT_NE(line, std::string::npos) << text;
  std::string first = text.substr(line, text.find('\n', line) - line);
  EXPECT_EQ(first.substr(first.size() - 4), "x...") << first;
  EXPECT_LE(first.size(), 130u) << first;
  // The busiest threads first, eight of them.
  EXPECT_NE(text.find("\n    threads: 110 t10: 11, 109 t9: 10, 108 t8: 9, 107 t7: 8, 106 t6: 7, "
                      "105 t5: 6, 104 t4: 5, 103 t3: 4, ... and 3 more\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  pid 30  worker    1 thread    2 op slices  python3 worker.py\n"
                      "    threads: 30 worker: 2\n"
                      "  pid 40  ?         1 thread    1 op slice   (no process descriptor in the file)\n"
                      "    threads: 41 orphan: 1\n"
                      "Span: 1.000s -> 1.000s (CLOCK_MONOTONIC): 2.100us\n"),
            std::string::npos)
      << text;
}

// --per-process: after the table over all, one per process under its line,
// each with its own ops and shares of its own self time.
TEST_F(ReportTest, PerProcessTables) {
  std::string path = Path("procs.pftrace"), error;
  WriteProcesses(path);
  DecodedTrace trace;
  ASSERT_TRUE(ReadTrace(path, &trace, &error)) << error;
  std::ostringstream plain;
  PrintReport(trace, plain);
  EXPECT_EQ(plain.str().find("\npid "), std::string::npos);

  std::ostringstream out;
  PrintReport(trace, out, {.per_process = true});
  std::string text = out.str();
  size_t all = text.find("Self CPU time total: 0.540us\n");  // 66*5 + 10 + 2*100 ns
  size_t p20 = text.find("\npid 20  trainer  11 threads  66 op slices  python3 -c");
  size_t p30 = text.find("\npid 30  worker    1 thread    2 op slices  python3 worker.py\n-----");
  size_t p40 = text.find(
      "\npid 40  ?         1 thread    1 op slice   (no process descriptor in the file)\n-----");
  size_t not_seen = text.find("What was not seen");
  ASSERT_NE(all, std::string::npos) << text;
  ASSERT_NE(p20, std::string::npos) << text;
  ASSERT_NE(p30, std::string::npos) << text;
  ASSERT_NE(p40, std::string::npos) << text;
  EXPECT_LT(all, p20);
  EXPECT_LT(p20, p30);
  EXPECT_LT(p30, p40);
  EXPECT_LT(p40, not_seen);
  std::string t20 = text.substr(p20, p30 - p20), t30 = text.substr(p30, p40 - p30);
  EXPECT_NE(t20.find("   aten::add       100.00%       0.330us       100.00%       0.330us       0.005us            66  "),
            std::string::npos) << t20;
  EXPECT_EQ(t20.find("aten::mul"), std::string::npos) << t20;
  EXPECT_NE(t20.find("Self CPU time total: 0.330us\n"), std::string::npos) << t20;
  EXPECT_NE(t30.find("   aten::mul       100.00%       0.200us       100.00%       0.200us       0.100us             2  "),
            std::string::npos) << t30;
  EXPECT_EQ(t30.find("aten::add"), std::string::npos) << t30;
}

// Issue 29: --group-by-input-shape makes a row per op and input shapes, as
// key_averages(group_by_input_shape=True) does, read from the slices'
// "Input Dims" (a --shapes trace); the rows of one op add up to its row
// without grouping; the shapes print as torch prints the list.
TEST_F(ReportTest, GroupByInputShape) {
  std::string path = Path("shapes.pftrace"), error;
  {
    auto writer = PerfettoWriter::Open(path, &error);
    ASSERT_NE(writer, nullptr) << error;
    writer->Begin({{"aten::add", "Tensor", "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"}},
                  ClockSnapshot{kMono, kMono});
    writer->AddProcess({20, "trainer", "python3 train.py"});
    writer->AddThread({20, 20, "main"});
    auto inputs = [](std::vector<int64_t> a, std::vector<int64_t> b) {
      auto in = std::make_shared<OpInputs>();
      for (const auto& sizes : {a, b}) {
        OpInput t;
        t.kind = OpInput::kTensor;
        t.type = "float";
        t.sizes = sizes;
        t.strides.assign(sizes.size(), 1);
        in->args.push_back(t);
      }
      in->args.push_back(OpInput{});
      return std::shared_ptr<const OpInputs>(in);
    };
    for (uint32_t i = 0; i < 3; ++i) {
      Slice s{kMono + i * 100, kMono + i * 100 + 10, 0, 0, 0};
      s.inputs = inputs({2, 3}, {2, 3});
      writer->AddSliceTree(20, 20, {s});
    }
    Slice other{kMono + 1000, kMono + 1040, 0, 0, 0};
    other.inputs = inputs({4}, {});
    writer->AddSliceTree(20, 20, {other});
    ASSERT_TRUE(writer->Finish(TraceStats{}, &error)) << error;
  }
  DecodedTrace trace;
  ASSERT_TRUE(ReadTrace(path, &trace, &error)) << error;
  std::vector<OpSummary> plain = Summarize(trace), grouped = Summarize(trace, true);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].calls, 4u);
  ASSERT_EQ(grouped.size(), 2u);
  EXPECT_EQ(grouped[0].input_shapes, "[[4],[],[]]") << "the most self time first";
  EXPECT_EQ(grouped[0].calls, 1u);
  EXPECT_EQ(grouped[1].input_shapes, "[[2,3],[2,3],[]]");
  EXPECT_EQ(grouped[1].calls, 3u);
  EXPECT_EQ(grouped[0].self_ns + grouped[1].self_ns, plain[0].self_ns);
  std::ostringstream out;
  PrintReport(trace, out, {.by_input_shape = true});
  EXPECT_NE(out.str().find("Input Shapes"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("[[2, 3], [2, 3], []]"), std::string::npos) << out.str();
  std::ostringstream without;
  PrintReport(trace, without);
  EXPECT_EQ(without.str().find("Input Shapes"), std::string::npos);
}

TEST_F(ReportTest, OneLineKeepsCommandLinesReadable) {
  EXPECT_EQ(OneLine("a\nb\tc", 10), "a b c");
  EXPECT_EQ(OneLine("abcdefghij", 10), "abcdefghij");
  EXPECT_EQ(OneLine("abcdefghijk", 10), "abcdefg...");
  // "\xc3\xa9" is one character (e-acute): never cut in half.
  EXPECT_EQ(OneLine("abcdef\xc3\xa9xyz", 10), "abcdef...");
  EXPECT_EQ(OneLine("abcde\xc3\xa9xyzw", 10), "abcde\xc3\xa9...");
}

TEST_F(ReportTest, DecodedModelKeepsStructure) {
  std::string path = Path("model.pftrace"), error;
  WriteKnown(path);
  DecodedTrace trace;
  ASSERT_TRUE(ReadTrace(path, &trace, &error)) << error;
  const DecodedThread* t = trace.FindThread(10, 10);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name, "python3");
  ASSERT_EQ(t->slices.size(), 4u);
  EXPECT_EQ(t->slices[2].parent, 1);
  EXPECT_EQ(t->slices[2].depth, 2);
  EXPECT_EQ(t->slices[3].parent, 0);
  EXPECT_EQ(trace.ops[t->slices[2].op].overload, "memory_format");
  EXPECT_EQ(t->slices[0].begin_ns, kMono);  // back on CLOCK_MONOTONIC
  const DecodedThread* w = trace.FindThread(10, 11);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->slices.size(), 1u);
  EXPECT_TRUE(w->slices[0].repaired_end);
  EXPECT_FALSE(w->slices[0].repaired_begin);
  EXPECT_EQ(trace.ops[w->slices[0].op].schema, "aten::mul.Scalar(Tensor self, Scalar other) -> Tensor");
}

}  // namespace
}  // namespace torchprobe

namespace torchprobe {
namespace {

// Writes two threads' top-level ops (1000 + 500 + 500 ns inside ops, 4
// slices of which one was unwound) with `stats`, and returns the report's text.
std::string ReportWithStats(const std::string& path, const TraceStats& stats) {
  std::string error;
  auto writer = PerfettoWriter::Open(path, &error);
  EXPECT_NE(writer, nullptr) << error;
  if (!writer) return "";
  writer->Begin({{"aten::linear", "", ""}, {"aten::mul", "Tensor", ""}}, ClockSnapshot{kMono, kMono});
  writer->AddThread({10, 10, "python3"});
  writer->AddThread({10, 11, "worker"});
  writer->AddSliceTree(10, 10, {{kMono + 0, kMono + 1000, 0, 0, 0}, {kMono + 100, kMono + 700, 1, 1, 0}});
  writer->AddSliceTree(10, 11, {{kMono + 2000, kMono + 2500, 1, 0, 0}});
  writer->AddSliceTree(10, 11, {{kMono + 3000, kMono + 3500, 0, 0, kSliceUnwound}});
  EXPECT_TRUE(writer->Finish(stats, &error)) << error;
  DecodedTrace trace;
  EXPECT_TRUE(ReadTrace(path, &trace, &error)) << error;
  std::ostringstream out;
  PrintReport(trace, out, {});
  unlink(path.c_str());
  return out.str();
}

TEST(ReportProbeCostTest, SaysHowMuchOfTheTracedTimeWasProbes) {
  std::string dir = testing::TempDir();
  TraceStats stats;
  stats.probe_ns_per_op = 100;
  stats.probe_ns_uretprobe = 100;
  stats.probe_ns_ret = 1200;
  stats.probe_ns_calibration = 30'000'000;
  std::string text = ReportWithStats(dir + "/probe_cost.pftrace", stats);
  EXPECT_NE(text.find("Probe cost (torchprobe's own, estimated)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("per op              0.100us (entry and return probes; calibrated: uretprobe "
                      "returns 0.100us, `ret` probes 1.200us, in 30.000ms)"),
            std::string::npos)
      << text;
  // 3 slices that returned x 100 ns of 2000 ns inside top-level ops.
  EXPECT_NE(text.find("in this trace       3 returned op slices x 0.100us = 0.300us, 15.00% of the 2.000us inside ops"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("a lower bound"), std::string::npos) << text;
  EXPECT_LT(text.find("Probe cost"), text.find("What was not seen"));
}

TEST(ReportProbeCostTest, SaysWhenNotCalibrated) {
  std::string text = ReportWithStats(testing::TempDir() + "/no_probe_cost.pftrace", TraceStats{});
  EXPECT_NE(text.find("per op              not estimated (no calibration in this trace)"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace torchprobe
