// Trace size (PerfettoWriter): bytes per op slice, plain and with
// --compress, on a deterministic stream of op trees shaped like a training
// loop; and a compressed trace reads the same as a plain one, in our reader
// and in Perfetto's trace_processor. No root needed.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/export/perfetto_writer.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

constexpr uint64_t kMono = 7'000'000'000'000;
constexpr int kOps = 60;
constexpr int kTrees = 5000;  // x 4 slices

OpTable ManyOps() {
  OpTable ops;
  for (int i = 0; i < kOps; ++i) {
    std::string name = "aten::op" + std::to_string(i);
    ops.push_back({name, i % 2 ? "Tensor" : "", name + (i % 2 ? ".Tensor" : "") +
                                                    "(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"});
  }
  return ops;
}

// Two threads; each tree an op calling three others, gaps and durations of
// 1-60 us from a fixed LCG: what a loop of small ops looks like.
uint64_t WriteLoop(const std::string& path, bool compress) {
  std::string error;
  auto writer = PerfettoWriter::Open(path, &error, {.compress = compress});
  EXPECT_NE(writer, nullptr) << error;
  if (!writer) return 0;
  writer->Begin(ManyOps(), ClockSnapshot{kMono + 5, kMono});
  writer->AddProcess({10, "python3", "python3 train.py"});
  writer->AddThread({10, 10, "python3"});
  writer->AddThread({10, 11, "pt_autograd_0"});
  uint32_t lcg = 12345;
  auto next = [&lcg](uint32_t max) {
    lcg = lcg * 1103515245 + 12345;
    return (lcg >> 8) % max;
  };
  uint64_t now[2] = {kMono, kMono};
  for (int i = 0; i < kTrees; ++i) {
    int t = i % 2;
    uint64_t begin = now[t] + 1000 + next(60'000);
    std::vector<Slice> tree = {{begin, 0, next(kOps), 0, 0}};
    uint64_t at = begin + 200;
    for (int c = 0; c < 3; ++c) {
      uint64_t end = at + 1000 + next(20'000);
      tree.push_back({at, end, next(kOps), 1, 0});
      at = end + 300;
    }
    tree[0].end_ns = at + 100;
    now[t] = tree[0].end_ns;
    writer->AddSliceTree(10, 10 + t, tree);
  }
  EXPECT_TRUE(writer->Finish(TraceStats{}, &error)) << error;
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_size);
}

class TraceSizeTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::MakeTempDir();
    plain_ = dir_ + "/plain.pftrace";
    compressed_ = dir_ + "/compressed.pftrace";
    plain_bytes_ = WriteLoop(plain_, false);
    compressed_bytes_ = WriteLoop(compressed_, true);
  }
  void TearDown() override {
    unlink(plain_.c_str());
    unlink(compressed_.c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_, plain_, compressed_;
  uint64_t plain_bytes_ = 0, compressed_bytes_ = 0;
};

TEST_F(TraceSizeTest, BytesPerSlice) {
  double slices = 4.0 * kTrees;
  RecordProperty("plain_bytes_per_slice", std::to_string(plain_bytes_ / slices));
  RecordProperty("compressed_bytes_per_slice", std::to_string(compressed_bytes_ / slices));
  // BEGIN ~29 bytes with its interned overload and schema, END ~11: see
  // perfetto_writer.h for why 20 is out of reach with the schema per slice.
  EXPECT_LE(plain_bytes_ / slices, 40.0);
  EXPECT_LE(compressed_bytes_ / slices, 8.0);
}

TEST_F(TraceSizeTest, CompressedReadsAsPlain) {
  DecodedTrace plain, compressed;
  std::string error;
  ASSERT_TRUE(ReadTrace(plain_, &plain, &error)) << error;
  ASSERT_TRUE(ReadTrace(compressed_, &compressed, &error)) << error;
  ASSERT_EQ(plain.slice_count(), 4u * kTrees);
  ASSERT_EQ(compressed.slice_count(), plain.slice_count());
  EXPECT_TRUE(compressed.has_stats);
  EXPECT_EQ(compressed.unterminated, 0u);
  ASSERT_EQ(compressed.threads.size(), plain.threads.size());
  for (size_t t = 0; t < plain.threads.size(); ++t) {
    const auto& a = plain.threads[t].slices;
    const auto& b = compressed.threads[t].slices;
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].begin_ns, b[i].begin_ns);
      EXPECT_EQ(a[i].end_ns, b[i].end_ns);
      EXPECT_EQ(a[i].depth, b[i].depth);
      EXPECT_EQ(plain.ops[a[i].op].schema, compressed.ops[b[i].op].schema);
      if (HasFailure()) return;
    }
  }
}

TEST_F(TraceSizeTest, TraceProcessorReadsBothAlike) {
  if (test::TraceProcessor().empty()) GTEST_SKIP() << "no trace_processor_shell (set TRACE_PROCESSOR)";
  const std::string slices =
      "select count(*), sum(dur), min(ts), max(ts + dur), sum(depth), count(distinct name) "
      "from slice where dur >= 0 and name like 'aten::%'";
  const std::string args =
      "select count(*), count(distinct display_value) from slice join args using(arg_set_id) "
      "where key = 'debug.schema'";
  const std::string problems =
      "select name, value from stats where value > 0 and severity in ('error', 'data_loss')";
  for (const std::string& sql : {slices, args}) {
    auto a = test::QueryTrace(plain_, sql);
    EXPECT_EQ(a, test::QueryTrace(compressed_, sql)) << sql;
    ASSERT_EQ(a.size(), 1u);
  }
  EXPECT_EQ(test::QueryTrace(plain_, slices)[0][0], std::to_string(4 * kTrees));
  EXPECT_TRUE(test::QueryTrace(plain_, problems).empty());
  EXPECT_TRUE(test::QueryTrace(compressed_, problems).empty());
}

// record --compress end to end: the file holds compressed packets and reads
// back whole, in our reader and in trace_processor.
TEST(TraceSizeRecordTest, RecordCompress) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
  if (!test::FileExists(test::FixturePath("op_storm"))) GTEST_SKIP() << "fixtures not built (make test)";
  std::string dir = test::MakeTempDir(), out = dir + "/compressed.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "-q", "--compress", "-o", out,
                                            "--", test::FixturePath("op_storm"), "400"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string bytes = test::ReadFile(out);
  // One outer packet (0x0A len) whose first field is compressed_packets (50,
  // length-delimited: tag 0x92 0x03).
  ASSERT_GT(bytes.size(), 4u);
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]), 0x0A);
  EXPECT_NE(bytes.substr(0, 8).find("\x92\x03"), std::string::npos);
  DecodedTrace trace;
  std::string error;
  ASSERT_TRUE(ReadTrace(out, &trace, &error)) << error;
  EXPECT_EQ(trace.slice_count(), 800u);
  EXPECT_TRUE(trace.has_stats);
  EXPECT_EQ(trace.stats.op_slices, 800u);
  if (!test::TraceProcessor().empty()) {
    auto rows = test::QueryTrace(out, "select count(*) from slice where dur >= 0 and name like 'aten::%'");
    EXPECT_EQ(rows, (std::vector<std::vector<std::string>>{{"800"}}));
    EXPECT_TRUE(test::QueryTrace(out, "select name, value from stats where value > 0 and "
                                      "severity in ('error', 'data_loss')").empty());
  }
  unlink(out.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace torchprobe
