// --shapes: where each op's Tensor arguments are travels in its op layout, BPF
// reads them at entry (bpf/shapes.bpf.c), the model turns them into the
// slice's inputs and the writers write them as PyTorch does. End to end: the
// Tensor arguments of a training loop equal torch.profiler's
// (record_shapes=True) and the execution trace observer's for >= 99% of the
// calls, on PyTorch 1.13 and 2.6, and so do their sequence numbers; what was
// not read is counted.
#include <unistd.h>

#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/collect/event_router.h"
#include "userspace/discover/tensor_args.h"
#include "userspace/export/chrome_trace_writer.h"
#include "userspace/export/execution_trace_writer.h"
#include "userspace/model/shapes_model.h"

namespace torchprobe {
namespace {

using test::Measures;

TEST(ShapesCookieTest, EachTensorPlaceIsOneByte) {
  using P = TensorArgPlace;
  // rsi, rdx: codes 2 and 3; rsp + 8: 7; rsp + 24: 9; unknown: 0.
  EXPECT_EQ(TensorPlaceCookie({{P::kRegister, 1}, {P::kRegister, 2}}), 0x0302u);
  EXPECT_EQ(TensorPlaceCookie({{P::kStack, 8}, {}, {P::kStack, 24}}), 0x090007u);
  // Only the first four; a stack slot past what a byte holds is not known.
  EXPECT_EQ(TensorPlaceCookie({{P::kRegister, 0}, {P::kRegister, 1}, {P::kRegister, 2}, {P::kRegister, 3},
                               {P::kRegister, 4}}),
            0x04030201u);
  EXPECT_EQ(TensorPlaceCookie({{P::kStack, 8 * 58}}), 0u);
  // An optional Tensor: bits 6-7 say which layout its pointer points at.
  EXPECT_EQ(TensorPlaceCookie({{P::kRegister, 2, TENSOR_REF_C10_OPTIONAL}, {P::kStack, 16, TENSOR_REF_STD_OPTIONAL}}),
            0x8843u);
  std::optional<std::vector<TensorArgPlace>> linear =
      TensorArgPlaces("(at::Tensor const&, at::Tensor const&, c10::optional<at::Tensor> const&)", "Tensor", true);
  ASSERT_TRUE(linear);
  EXPECT_EQ(TensorPlaceCookie(*linear), 0x440302u);  // rsi, rdx; rcx to an optional
  EXPECT_EQ(TensorArgPlaces("(at::Tensor const&, c10::optional<at::Tensor> const&)", "Tensor")->size(), 1u)
      << "optionals only when asked for";
  // From a symbol and its schema: add.Tensor returns a Tensor (rdi hidden).
  const char* add = "_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE";
  EXPECT_EQ(TensorPlaceCookieOf(add, "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"),
            0x0302u);
  EXPECT_EQ(TensorPlaceCookieOf(add, "not a schema"), 0u);
}

TEST(ShapesCookieTest, SchemaArgumentsSayWhichAreReadableTensors) {
  std::optional<std::vector<SchemaArg>> args = SchemaArgsOf(
      "aten::addmm.out(Tensor self, Tensor mat1, Tensor? bias, Tensor[] list, *, Scalar beta=1, Tensor(a!) out) -> "
      "Tensor(a!)j");
  ASSERT_TRUE(args);
  ASSERT_EQ(args->size(), 6u);  // "*" is not an argument
  std::vector<bool> tensor, scalar;
  for (const SchemaArg& a : *args) {
    tensor.push_back(a.tensor);
    scalar.push_back(a.scalar);
  }
  EXPECT_EQ(tensor, (std::vector<bool>{true, true, true, false, false, true}));
  EXPECT_EQ(scalar, (std::vector<bool>{false, false, false, false, true, false}));
  EXPECT_FALSE(SchemaArgsOf(""));
}

tp_op_shapes_event Event(uint32_t op_id) {
  tp_op_shapes_event e;
  std::memset(&e, 0, sizeof(e));
  e.op.hdr.type = EV_OP_SHAPES;
  e.op.hdr.size = sizeof(e);
  e.op.hdr.pid = 7;
  e.op.hdr.tid = 8;
  e.op.hdr.ts_ns = 1000;
  e.op.op_id = op_id;
  e.op.frame = 0x7ff0;
  return e;
}

void SetTensor(tp_tensor_meta& t, std::vector<int64_t> sizes, std::vector<int64_t> strides, uint16_t dtype,
               uint64_t impl) {
  t.status = TENSOR_READ;
  t.dims = static_cast<uint32_t>(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    t.sizes[i] = sizes[i];
    t.strides[i] = strides[i];
  }
  t.dtype = dtype;
  t.impl = impl;
}

const OpTable kOps = {
    {"aten::add", "Tensor", "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"},
    {"aten::five", "", "aten::five(Tensor a, Tensor b, Tensor c, Tensor d, Tensor e) -> Tensor"},
    {"aten::unknown", "", ""}};

ShapesModel Model() { return ShapesModel(&kOps, [](const OpInfo& op) { return SchemaArgsOf(op.schema); }); }

TEST(ShapesModelTest, AnEntrysTensorsBecomeOneInputPerSchemaArgument) {
  ShapesModel model = Model();
  TraceStats stats;
  tp_op_shapes_event e = Event(0);
  SetTensor(e.tensors[0], {3, 4}, {4, 1}, 6, 0x1000);
  SetTensor(e.tensors[1], {}, {}, 7, 0x2000);  // a wrapped Python float: 0-dim double
  e.tensors[0].storage_offset = 5;
  std::optional<OpInputs> in = model.Build(e, stats);
  ASSERT_TRUE(in);
  ASSERT_EQ(in->args.size(), 3u);
  EXPECT_EQ(in->args[0].kind, OpInput::kTensor);
  EXPECT_EQ(in->args[0].type, "float");
  EXPECT_EQ(in->args[0].sizes, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(in->args[0].strides, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(in->args[0].storage_offset, 5);
  EXPECT_EQ(in->args[0].numel, 12);
  EXPECT_EQ(in->args[0].itemsize, 4u);
  EXPECT_EQ(in->args[1].type, "double");
  EXPECT_EQ(in->args[1].numel, 1);
  EXPECT_EQ(in->args[2].kind, OpInput::kOther);
  EXPECT_EQ(in->args[2].type, "Scalar");
  EXPECT_EQ(stats.tensor_args_read, 2u);
  EXPECT_EQ(in->sequence_number, 0) << "the event's, zeroed";
  e.sequence_nr = TP_SEQ_UNREAD;
  EXPECT_EQ(model.Build(e, stats)->sequence_number, -1);
  EXPECT_EQ(stats.sequence_numbers_unread, 1u);
  e.sequence_nr = 41;
  // One TensorImpl, one id; another, another.
  std::optional<OpInputs> again = model.Build(e, stats);
  EXPECT_EQ(again->sequence_number, 41);
  EXPECT_EQ(again->args[0].tensor_id, in->args[0].tensor_id);
  EXPECT_NE(again->args[1].tensor_id, in->args[0].tensor_id);
  EXPECT_FALSE(model.Build(Event(2), stats)) << "no schema: no inputs";
}

// Issue 29: an undefined Tensor (its TensorImpl is libc10's
// UndefinedTensorImpl singleton: an optional weight passed as at::Tensor())
// is written as the profiler writes it, no type and no dims, not as the
// singleton's own sizes; only in the process whose singleton it is.
TEST(ShapesModelTest, AnUndefinedTensorHasNoDims) {
  ShapesModel model = Model();
  TraceStats stats;
  tp_op_shapes_event e = Event(0);
  SetTensor(e.tensors[0], {3, 4}, {4, 1}, 6, 0x1000);
  SetTensor(e.tensors[1], {0}, {1}, 0, 0x5000);  // what the singleton reads as
  model.SetUndefinedImpl(8, 0x5000);             // another process'
  EXPECT_EQ(model.Build(e, stats)->args[1].kind, OpInput::kTensor);
  model.SetUndefinedImpl(7, 0x5000);
  std::optional<OpInputs> in = model.Build(e, stats);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->args[0].kind, OpInput::kTensor);
  EXPECT_EQ(in->args[1].kind, OpInput::kOther);
  EXPECT_TRUE(in->args[1].sizes.empty());
  EXPECT_EQ(in->args[1].type, "");
}

TEST(ShapesModelTest, TensorsNotReadAreCountedByWhy) {
  ShapesModel model = Model();
  TraceStats stats;
  tp_op_shapes_event e = Event(1);
  SetTensor(e.tensors[0], {2}, {1}, 4, 0x1000);
  e.tensors[1].status = TENSOR_NOT_READ;
  e.tensors[2].status = TENSOR_UNREADABLE;
  e.tensors[3].status = TENSOR_TOO_MANY_DIMS;
  e.tensors[3].dims = 9;
  tp_op_shapes_event none = e;
  none.tensors[1].status = TENSOR_ABSENT;  // an optional that is None: nothing to read, nothing lost
  std::optional<OpInputs> with_none = model.Build(none, stats);
  EXPECT_EQ(with_none->args[1].kind, OpInput::kOther);
  EXPECT_EQ(with_none->args[1].type, "");
  stats = TraceStats();
  std::optional<OpInputs> in = model.Build(e, stats);
  ASSERT_TRUE(in);
  ASSERT_EQ(in->args.size(), 5u);
  EXPECT_EQ(in->args[0].type, "long int");
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(in->args[i].kind, OpInput::kTensorUnknown) << i;
  EXPECT_EQ(stats.tensor_args_read, 1u);
  EXPECT_EQ(stats.tensor_args_unplaced, 1u);
  EXPECT_EQ(stats.tensor_args_unreadable, 1u);
  EXPECT_EQ(stats.tensor_args_cut, 1u);
  EXPECT_EQ(stats.tensor_args_past_limit, 1u);  // the fifth
}

// Its op entry is what opens the slice the shapes fill.
TEST(ShapesModelTest, ItsEntryIsAnOpEntry) {
  tp_op_shapes_event e = Event(0);
  EventRouter router;
  std::vector<tp_op_event> entries;
  router.On<tp_op_shapes_event>({EV_OP_SHAPES},
                                [&](const tp_op_shapes_event& s) { entries.push_back(EventRouter::EntryOf(s.op)); });
  ASSERT_TRUE(router.Route(&e, sizeof(e)));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].hdr.type, EV_OP_ENTER);
  EXPECT_EQ(entries[0].frame, 0x7ff0u);
  e.op.hdr.size = sizeof(e) - 8;
  EXPECT_FALSE(router.Route(&e, sizeof(e) - 8));
  EXPECT_EQ(router.stats().malformed, 1u);
}

TEST(ShapesModelTest, SlicesCarryTheirInputsToBothJsonWriters) {
  ShapesModel model = Model();
  TraceStats stats;
  tp_op_shapes_event e = Event(0);
  SetTensor(e.tensors[0], {3, 4}, {1, 3}, 6, 0x1000);
  SetTensor(e.tensors[1], {4}, {1}, 6, 0x2000);
  e.sequence_nr = 17;
  auto inputs = std::make_shared<const OpInputs>(*model.Build(e, stats));
  std::string dir = test::MakeTempDir(), error;
  {
    auto chrome = ChromeTraceWriter::Open(dir + "/c.json", &error);
    auto et = ExecutionTraceWriter::Open(dir + "/e.json", &error);
    ASSERT_TRUE(chrome && et) << error;
    for (TraceSink* sink : {static_cast<TraceSink*>(chrome.get()), static_cast<TraceSink*>(et.get())}) {
      sink->Begin(kOps, ClockSnapshot{1, 1000});
      sink->AddProcess({7, "python3", "", -1});
      sink->AddThread({7, 8, "python3"});
      Slice s{1000, 2000, 0, 0, 0, 0x7ff0, inputs};
      sink->AddSliceTree(7, 8, {s});
      ASSERT_TRUE(sink->Finish(TraceStats(), &error)) << error;
    }
  }
  std::string chrome = test::ReadFile(dir + "/c.json"), et = test::ReadFile(dir + "/e.json");
  EXPECT_NE(chrome.find(R"j("Input Dims": [[3,4],[4],[]])j"), std::string::npos) << chrome;
  EXPECT_NE(chrome.find(R"j("Input type": ["float","float","Scalar"])j"), std::string::npos) << chrome;
  EXPECT_NE(chrome.find(R"j("Input Strides": [[1,3],[1],[]])j"), std::string::npos) << chrome;
  EXPECT_NE(et.find(R"j("shapes": [[3,4],[4],[]], "types": ["Tensor(float)","Tensor(float)","Scalar"])j"),
            std::string::npos)
      << et;
  EXPECT_NE(et.find(R"j("values": [[1,0,0,12,4,""],[2,0,0,4,4,""],""])j"), std::string::npos) << et;
  EXPECT_NE(et.find(R"j("strides": [[1,3],[1],[]]})j"), std::string::npos) << et;
  EXPECT_NE(chrome.find(R"j("Sequence number": 17)j"), std::string::npos) << chrome;
  EXPECT_NE(et.find(R"j({"name": "seq_id", "type": "int64", "value": 17})j"), std::string::npos) << et;
  test::RemoveTempDir(dir);
}

// Our --chrome and --et outputs of shapes_loop.py / et_loop.py against
// PyTorch's own for the same script (shapes_compare.py).
class ShapesRecordTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::MakeTempDir(); }
  void TearDown() override { test::RemoveTempDir(dir_); }
  void ExpectMatches(const std::string& ours, const std::string& reference, const std::string& what) {
    test::CommandResult r = test::RunCommand({test::Python(), test::Fixture("shapes_compare.py"), ours, reference});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::map<std::string, std::string> m = Measures(r.out);
    std::printf("  %s: %s calls compared, %.2f%% equal; %.1f%% of their Tensor arguments not read\n", what.c_str(),
                m["ref_ops"].c_str(), 100 * std::stod(m["matched"]), 100 * std::stod(m["unread_tensors"]));
    EXPECT_GT(std::stoull(m["ref_ops"]), 150u) << what << "\n" << r.out;
    EXPECT_GE(std::stod(m["matched"]), 0.99) << what << "\n" << r.out;
    // Not read: the few places the ABI rules leave unknown (counted in the stats).
    EXPECT_LE(std::stod(m["unread_tensors"]), 0.05) << what << "\n" << r.out;
    EXPECT_EQ(m["ours_with_inputs"], "1.0") << what << ": every libtorch op entry carries its inputs";
    // Sequence numbers: every op the reference numbers has ours (we number
    // the ops it leaves at -1 too: see the README).
    std::printf("  %s: %s sequence numbers compared, %.2f%% equal\n", what.c_str(), m["seq_ref"].c_str(),
                100 * std::stod(m["seq_matched"]));
    EXPECT_GT(std::stoull(m["seq_ref"]), 15u) << what << "\n" << r.out;
    EXPECT_GE(std::stod(m["seq_matched"]), 0.99) << what << "\n" << r.out;
  }
  // The shapes stats say what was read and why the rest was not.
  void ExpectStatsCounted(const std::string& chrome) {
    std::string text = test::ReadFile(chrome);
    EXPECT_NE(text.find("\"shapes_traced\": 1"), std::string::npos);
    EXPECT_EQ(text.find("\"tensor_args_read\": 0,"), std::string::npos) << "nothing read";
    EXPECT_NE(text.find("\"tensor_args_unplaced\""), std::string::npos);
    EXPECT_NE(text.find("\"sequence_numbers_unplaced\": 0,"), std::string::npos) << "launched: found once relocated";
  }
  // record --shapes of `python ARGS` launched, into the files asked for.
  test::CommandResult Record(const std::vector<std::string>& outputs, std::vector<std::string> python) {
    std::vector<std::string> argv = {test::TorchprobeBinary(), "record", "--shapes"};
    argv.insert(argv.end(), outputs.begin(), outputs.end());
    argv.push_back("--");
    argv.insert(argv.end(), python.begin(), python.end());
    return test::RunCommand(argv);
  }
  std::string dir_;
};

TEST_F(ShapesRecordTest, InputShapesOfPyTorch113EqualItsProfilersAndObservers) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string ref = dir_ + "/ref.json", eg = dir_ + "/eg.json";
  ASSERT_EQ(test::RunCommand({test::Python(), test::Fixture("shapes_loop.py"), "--iters", "3", "--profile", ref})
                .exit_code,
            0);
  ASSERT_EQ(
      test::RunCommand({test::Python(), test::Fixture("et_loop.py"), "--iters", "2", "--observer", eg}).exit_code, 0);
  std::string chrome = dir_ + "/t.json", pf = dir_ + "/t.pftrace", et = dir_ + "/t.et.json";
  test::CommandResult r =
      Record({"--chrome", chrome, "-o", pf}, {test::Python(), test::Fixture("shapes_loop.py"), "--iters", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("shapes: "), std::string::npos) << "the summary says what was read: " << r.err;
  ExpectMatches(chrome, ref, "1.13 Chrome vs torch.profiler(record_shapes=True)");
  ExpectStatsCounted(chrome);
  r = Record({"--et", et}, {test::Python(), test::Fixture("et_loop.py"), "--iters", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectMatches(et, eg, "1.13 ET vs ExecutionGraphObserver");
  // report says what was read and why the rest was not.
  test::CommandResult rep = test::RunCommand({test::TorchprobeBinary(), "report", pf});
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_NE(rep.out.find("tensor shapes"), std::string::npos) << rep.out;
  EXPECT_NE(rep.out.find("Tensor arguments read"), std::string::npos) << rep.out;
  // The Perfetto trace carries them as slice args, and loads clean.
  std::string tp = test::TraceProcessor();
  if (tp.empty()) return;
  test::CommandResult q = test::RunCommand(
      {tp, "-Q", "select count(*) as n from args where key = 'debug.Input Dims' union all "
                 "select count(*) from stats where value > 0 and severity != 'info'",
       pf});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  std::istringstream rows(q.out);
  std::string header, dims, problems;
  std::getline(rows, header);
  std::getline(rows, dims);
  std::getline(rows, problems);
  EXPECT_GT(std::stoull(dims), 100u) << q.out;
  EXPECT_EQ(problems, "0") << q.out;
}

TEST_F(ShapesRecordTest, InputShapesOfPyTorch26EqualItsProfilersAndObservers) {
  TP_REQUIRE_ROOT_AND_TORCH();
  std::string root = test::Torch2Root();
  if (root.empty()) GTEST_SKIP() << test::Torch2RootMissing();
  std::string name = "/tmp/torchprobe-shapes-" + std::to_string(getpid());
  ASSERT_EQ(test::RunCommand({"cp", test::Fixture("shapes_loop.py"), root + name + ".py"}).exit_code, 0);
  ASSERT_EQ(test::RunCommand({"cp", test::Fixture("et_loop.py"), root + name + "-et.py"}).exit_code, 0);
  test::CommandResult ref =
      test::RunCommand(test::Torch2Python(root, name + ".py", {"--iters", "3", "--profile", name + "-ref.json"}));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  ref = test::RunCommand(test::Torch2Python(root, name + "-et.py", {"--iters", "2", "--observer", name + "-eg.json"}));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  std::string chrome = dir_ + "/t.json", et = dir_ + "/t.et.json";
  test::CommandResult r = Record({"--chrome", chrome}, test::Torch2Python(root, name + ".py", {"--iters", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectMatches(chrome, root + name + "-ref.json", "2.6 Chrome vs torch.profiler(record_shapes=True)");
  ExpectStatsCounted(chrome);
  r = Record({"--et", et}, test::Torch2Python(root, name + "-et.py", {"--iters", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ExpectMatches(et, root + name + "-eg.json", "2.6 ET vs ExecutionTraceObserver");
  for (const char* suffix : {".py", "-et.py", "-ref.json", "-eg.json"}) unlink((root + name + suffix).c_str());
  test::RunCommand({"rm", "-rf", root + name + "-eg_resources"});  // the 2.6 observer's side folder
}

}  // namespace
}  // namespace torchprobe
