// `torchprobe report`: one-line errors for files that are not (whole)
// traces, and the key_averages()-style table's numbers on a known trace.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "userspace/export/perfetto_writer.h"
#include "userspace/report/report.h"
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

TEST_F(ReportTest, TruncatedTrace) {
  std::string good = Path("good.pftrace"), cut = Path("cut.pftrace"), error;
  WriteKnown(good);
  std::string bytes = ReadBytes(good);
  ASSERT_GT(bytes.size(), 20u);
  WriteBytes(cut, bytes.substr(0, bytes.size() - 5));
  std::ostringstream out;
  EXPECT_FALSE(Report(cut, {}, out, &error));
  EXPECT_EQ(error.rfind(cut + ": truncated at byte ", 0), 0u) << error;
  EXPECT_NE(error.find(" bytes, "), std::string::npos) << error;
  EXPECT_NE(error.find(" left)"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);

  // Cut right after a packet's tag byte: the length itself is missing.
  DecodedTrace trace;
  size_t first_packet = 2 + static_cast<unsigned char>(bytes[1]);  // lengths < 128 here
  WriteBytes(cut, bytes.substr(0, first_packet + 1));
  EXPECT_FALSE(ReadTrace(cut, &trace, &error));
  EXPECT_EQ(error, cut + ": truncated at byte " + std::to_string(first_packet) +
                       " (packet length cut off, 1 bytes left)");
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

  std::ostringstream top2;
  PrintReport(trace, top2, {2});
  EXPECT_EQ(top2.str().find("aten::linear"), std::string::npos);
  EXPECT_NE(top2.str().find("Self CPU time total: 1.500us"), std::string::npos);  // over all ops
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
