// The boxed model on synthetic event sequences: a copy of
// Dispatcher::callBoxed renamed to the op it called, schema included or the
// op interned without one, unobserved ops dropped with their return, and one
// slice per dispatcher entry when the boxed kernel calls the same op's ::call.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/fakes.h"
#include "userspace/model/boxed_model.h"
#include "userspace/model/op_stack_model.h"

namespace torchprobe {
namespace {

constexpr uint32_t kMm = 0, kAddTensor = 1, kCopy = 2;  // the op table below

using test::Frame;

tp_op_event Op(uint16_t type, uint64_t ts, uint32_t op, int depth) {
  return test::OpEvent(type, 10, 10, ts, op, Frame(depth));
}

tp_boxed_event Boxed(uint64_t ts, const char* name, const char* overload, int depth) {
  tp_boxed_event e = {};
  e.hdr = {EV_BOXED_ENTER, sizeof(e), 10, 10, 0, ts};
  e.op_id = kCopy;
  e.frame = Frame(depth);
  e.def = 0x1000;
  std::strncpy(e.name, name, sizeof(e.name) - 1);
  std::strncpy(e.overload, overload, sizeof(e.overload) - 1);
  return e;
}

class BoxedModelTest : public ::testing::Test {
 protected:
  BoxedModelTest()
      : ops_{{"aten::mm", "", "aten::mm(Tensor self, Tensor mat2) -> Tensor"},
             {"aten::add", "Tensor", "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"},
             {"c10::callBoxed", "", ""}},
        model_(&sink_, &names_, Options()),
        boxed_(&ops_, &model_, [this] { ++grew_; }) {
    boxed_.AddCopy(kCopy);
  }
  static OpStackModel::Options Options() {
    OpStackModel::Options o;
    o.preamble_ns = 0;
    return o;
  }
  void Finish() { model_.FinishThreads(1'000'000); }

  OpTable ops_;
  test::RecordingSink sink_;
  test::FixedNames names_{"python3", "python3", "python3"};
  OpStackModel model_;
  BoxedModel boxed_;
  int grew_ = 0;
};

TEST_F(BoxedModelTest, ACopyBecomesTheOpItCalledWithItsSchema) {
  boxed_.OnBoxedEvent(Boxed(100, "aten::add", "Tensor", 1));
  boxed_.OnOpEvent(Op(EV_OP_ENTER, 110, kMm, 2));  // the kernel calls another op
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 120, kMm, 2));
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 130, kCopy, 1));
  Finish();
  ASSERT_EQ(sink_.all.size(), 2u);
  EXPECT_EQ(sink_.all[0].op_id, kAddTensor);
  EXPECT_EQ(sink_.all[0].begin_ns, 100u);
  EXPECT_EQ(sink_.all[0].end_ns, 130u);
  EXPECT_EQ(sink_.all[0].flags, 0);
  EXPECT_EQ(sink_.all[1].op_id, kMm);
  EXPECT_EQ(sink_.all[1].depth, 1);
  EXPECT_EQ(grew_, 0);
  EXPECT_EQ(model_.stats().boxed_ops_unlisted, 0u);
}

TEST_F(BoxedModelTest, AnOpNoCallNamesIsInternedOnceWithoutSchema) {
  for (uint64_t ts : {100, 200}) {
    boxed_.OnBoxedEvent(Boxed(ts, "myops::scale", "", 1));
    boxed_.OnOpEvent(Op(EV_OP_EXIT, ts + 10, kCopy, 1));
  }
  Finish();
  ASSERT_EQ(ops_.size(), 4u);
  EXPECT_EQ(ops_[3].name, "myops::scale");
  EXPECT_EQ(ops_[3].schema, "");
  EXPECT_EQ(grew_, 1);
  EXPECT_EQ(model_.stats().boxed_ops_unlisted, 1u);
  ASSERT_EQ(sink_.all.size(), 2u);
  EXPECT_EQ(sink_.all[0].op_id, 3u);
  EXPECT_EQ(sink_.all[1].op_id, 3u);
}

TEST_F(BoxedModelTest, UnobservedOpsAreDroppedWithTheirReturn) {
  boxed_.OnBoxedEvent(Boxed(100, "aten::mm", "", 1));
  boxed_.OnBoxedEvent(Boxed(110, "aten::size", "int", 2));  // torch.ops.aten.size inside
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 120, kCopy, 2));
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 130, kCopy, 1));
  Finish();
  ASSERT_EQ(sink_.all.size(), 1u);
  EXPECT_EQ(sink_.all[0].op_id, kMm);
  EXPECT_EQ(sink_.all[0].end_ns, 130u);
  EXPECT_EQ(sink_.all[0].flags, 0);
  EXPECT_EQ(model_.stats().end_repaired + model_.stats().begin_repaired, 0u);
}

TEST_F(BoxedModelTest, TheSameOpsCallRightInsideIsOneSlice) {
  boxed_.OnBoxedEvent(Boxed(100, "aten::mm", "", 1));
  boxed_.OnOpEvent(Op(EV_OP_ENTER, 105, kMm, 2));  // boxed-to-unboxed wrapper: mm's ::call
  boxed_.OnOpEvent(Op(EV_OP_ENTER, 110, kAddTensor, 3));
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 115, kAddTensor, 3));
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 120, kMm, 2));
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 130, kCopy, 1));
  Finish();
  ASSERT_EQ(sink_.all.size(), 2u);
  EXPECT_EQ(sink_.all[0].op_id, kMm);
  EXPECT_EQ(sink_.all[0].end_ns, 130u);
  EXPECT_EQ(sink_.all[1].op_id, kAddTensor);
  EXPECT_EQ(sink_.all[1].depth, 1);
  EXPECT_EQ(model_.stats().boxed_duplicates, 1u);
  EXPECT_EQ(model_.stats().mismatched_exits + model_.stats().begin_repaired, 0u);
}

TEST_F(BoxedModelTest, TheSameOpAfterAnotherIsNested) {
  // aten::mm boxed, whose kernel calls add, then mm again: not a duplicate.
  boxed_.OnBoxedEvent(Boxed(100, "aten::mm", "", 1));
  boxed_.OnOpEvent(Op(EV_OP_ENTER, 105, kAddTensor, 2));
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 108, kAddTensor, 2));
  boxed_.OnOpEvent(Op(EV_OP_ENTER, 110, kMm, 2));
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 120, kMm, 2));
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 130, kCopy, 1));
  Finish();
  ASSERT_EQ(sink_.all.size(), 3u);
  EXPECT_EQ(sink_.all[2].op_id, kMm);
  EXPECT_EQ(sink_.all[2].depth, 1);
  EXPECT_EQ(model_.stats().boxed_duplicates, 0u);
}

TEST_F(BoxedModelTest, AnUnreadableHandleKeepsTheCopysNameAndIsCounted) {
  boxed_.OnBoxedEvent(Boxed(100, "", "", 1));
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 130, kCopy, 1));
  Finish();
  ASSERT_EQ(sink_.all.size(), 1u);
  EXPECT_EQ(sink_.all[0].op_id, kCopy);
  EXPECT_EQ(model_.stats().boxed_unread, 1u);
}

TEST_F(BoxedModelTest, AnExceptionUnwindingABoxedCallForgetsIt) {
  boxed_.OnBoxedEvent(Boxed(100, "aten::mm", "", 2));
  tp_op_event unwind = Op(EV_OP_UNWIND, 120, 0, 1);  // caught in the caller's frame
  boxed_.OnOpEvent(unwind);
  boxed_.OnBoxedEvent(Boxed(130, "aten::add", "Tensor", 2));
  boxed_.OnOpEvent(Op(EV_OP_EXIT, 140, kCopy, 2));
  Finish();
  ASSERT_EQ(sink_.all.size(), 2u);
  EXPECT_EQ(sink_.all[0].op_id, kMm);
  EXPECT_EQ(sink_.all[0].flags, kSliceUnwound);
  EXPECT_EQ(sink_.all[1].op_id, kAddTensor);
  EXPECT_EQ(sink_.all[1].end_ns, 140u);
}

}  // namespace
}  // namespace torchprobe
