// The op stack model on recorded event sequences: nesting, and every kind of
// repair (attach mid-op, stop mid-op, lost entries and returns, thread exit).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/fakes.h"
#include "userspace/model/op_stack_model.h"

namespace torchprobe {
namespace {

// Each tree the model hands on is a whole top-level one.
class RecordingSink : public test::RecordingSink {
 public:
  void AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) override {
    ASSERT_FALSE(slices.empty());
    EXPECT_EQ(slices[0].depth, 0);
    test::RecordingSink::AddSliceTree(pid, tid, slices);
  }
};

// python3 everywhere; thread 11's name is not known.
class FixedNames : public test::FixedNames {
 public:
  FixedNames() { unnamed_tid = 11; }
};

using test::Frame;

tp_op_event Op(uint16_t type, uint32_t tid, uint64_t ts, uint32_t op, int depth) {
  return test::OpEvent(type, 10, tid, ts, op, Frame(depth));
}
tp_op_event Enter(uint32_t tid, uint64_t ts, uint32_t op, int depth) {
  return Op(EV_OP_ENTER, tid, ts, op, depth);
}
tp_op_event Exit(uint32_t tid, uint64_t ts, uint32_t op, int depth) {
  return Op(EV_OP_EXIT, tid, ts, op, depth);
}

// Every slice lies within its parent, and siblings do not overlap.
void ExpectWellFormed(const std::vector<Slice>& preorder) {
  std::vector<const Slice*> stack;
  for (const Slice& s : preorder) {
    EXPECT_LE(s.begin_ns, s.end_ns);
    while (stack.size() > s.depth) stack.pop_back();
    ASSERT_EQ(stack.size(), s.depth) << "depth jumps";
    if (!stack.empty()) {
      EXPECT_GE(s.begin_ns, stack.back()->begin_ns);
      EXPECT_LE(s.end_ns, stack.back()->end_ns);
    }
    stack.push_back(&s);
  }
}

OpStackModel::Options NoPreamble() {
  OpStackModel::Options options;
  options.preamble_ns = 0;
  return options;
}

TEST(OpStackModelTest, NestsAsTheOpsRan) {
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names, NoPreamble());
  model.SetStart(100);
  for (auto e : {Enter(1, 110, 5, 0), Enter(1, 120, 6, 1), Exit(1, 130, 6, 1), Enter(1, 140, 7, 1),
                 Exit(1, 150, 7, 1), Exit(1, 160, 5, 0), Enter(1, 170, 8, 0), Exit(1, 180, 8, 0)})
    model.OnOpEvent(e);
  model.FinishThreads(200);
  ASSERT_EQ(sink.trees.size(), 2u);
  ASSERT_EQ(sink.trees[0].size(), 3u);
  EXPECT_EQ(sink.trees[0][0].op_id, 5u);
  EXPECT_EQ(sink.trees[0][1].depth, 1);
  EXPECT_EQ(sink.trees[0][2].op_id, 7u);
  EXPECT_EQ(sink.trees[0][2].end_ns, 150u);
  EXPECT_EQ(sink.trees[1][0].op_id, 8u);
  EXPECT_EQ(model.stats().events, 8u);
  EXPECT_EQ(model.stats().begin_repaired + model.stats().end_repaired, 0u);
  ASSERT_EQ(sink.processes.size(), 1u);
  EXPECT_EQ(sink.processes[0].cmdline, "python3 train.py");
  EXPECT_EQ(names.process_reads, 1) << "read once, when first seen";
  ASSERT_EQ(sink.threads.size(), 1u);
  EXPECT_EQ(sink.threads[0].name, "python3");
  for (auto& tree : sink.trees) ExpectWellFormed(tree);
}

TEST(OpStackModelTest, AttachInsideOpsEnclosesWhatRanMeanwhile) {
  // Probes go live at 100 while the thread is inside op 1 (inside op 0).
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names);  // default preamble holds the thread back
  model.SetStart(100);
  for (auto e : {Enter(1, 110, 5, 2), Exit(1, 120, 5, 2), Exit(1, 130, 1, 1), Enter(1, 140, 6, 1),
                 Exit(1, 150, 6, 1), Exit(1, 160, 0, 0)})
    model.OnOpEvent(e);
  model.FinishThreads(200);
  ASSERT_EQ(sink.trees.size(), 1u);
  const std::vector<Slice>& t = sink.trees[0];
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].op_id, 0u);
  EXPECT_EQ(t[0].begin_ns, 100u);
  EXPECT_EQ(t[0].end_ns, 160u);
  EXPECT_TRUE(t[0].flags & kSliceBeginUnseen);
  EXPECT_EQ(t[1].op_id, 1u);
  EXPECT_EQ(t[1].depth, 1);
  EXPECT_EQ(t[1].end_ns, 130u);
  EXPECT_EQ(t[2].op_id, 5u);
  EXPECT_EQ(t[2].depth, 2);
  EXPECT_EQ(t[3].op_id, 6u);
  EXPECT_EQ(t[3].depth, 1);
  EXPECT_EQ(model.stats().begin_repaired, 2u);
  ExpectWellFormed(t);
}

TEST(OpStackModelTest, StopInsideOpsClosesThemAtTheEnd) {
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names, NoPreamble());
  model.SetStart(100);
  for (auto e : {Enter(1, 110, 5, 0), Enter(1, 120, 6, 1), Exit(1, 130, 6, 1), Enter(1, 140, 7, 1)})
    model.OnOpEvent(e);
  model.FinishThreads(200);
  ASSERT_EQ(sink.trees.size(), 1u);
  const std::vector<Slice>& t = sink.trees[0];
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].end_ns, 200u);
  EXPECT_TRUE(t[0].flags & kSliceEndUnseen);
  EXPECT_EQ(t[1].flags, 0);
  EXPECT_EQ(t[2].end_ns, 200u);
  EXPECT_TRUE(t[2].flags & kSliceEndUnseen);
  EXPECT_EQ(model.stats().end_repaired, 2u);
  ExpectWellFormed(t);
}

TEST(OpStackModelTest, LostReturnIsClosedByTheOuterReturn) {
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names, NoPreamble());
  model.SetStart(100);
  // op 6's return was dropped.
  for (auto e : {Enter(1, 110, 5, 0), Enter(1, 120, 6, 1), Exit(1, 160, 5, 0)}) model.OnOpEvent(e);
  model.FinishThreads(200);
  ASSERT_EQ(sink.trees.size(), 1u);
  const std::vector<Slice>& t = sink.trees[0];
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].end_ns, 160u);
  EXPECT_EQ(t[0].flags, 0);
  EXPECT_EQ(t[1].end_ns, 160u);
  EXPECT_TRUE(t[1].flags & kSliceEndUnseen);
  EXPECT_EQ(model.stats().mismatched_exits, 1u);
  ExpectWellFormed(t);
}

TEST(OpStackModelTest, LostEntryBecomesAChildAfterItsLastSibling) {
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names, NoPreamble());
  model.SetStart(100);
  // op 7's entry was dropped; it ran after op 6 inside op 5.
  for (auto e : {Enter(1, 110, 5, 0), Enter(1, 120, 6, 1), Exit(1, 130, 6, 1), Exit(1, 150, 7, 1),
                 Exit(1, 160, 5, 0)})
    model.OnOpEvent(e);
  model.FinishThreads(200);
  const std::vector<Slice>& t = sink.trees.at(0);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[2].op_id, 7u);
  EXPECT_EQ(t[2].begin_ns, 130u);
  EXPECT_EQ(t[2].end_ns, 150u);
  EXPECT_EQ(t[2].depth, 1);
  EXPECT_TRUE(t[2].flags & kSliceBeginUnseen);
  ExpectWellFormed(t);
}

TEST(OpStackModelTest, LateUnmatchedReturnStartsAfterTheLastEmittedSlice) {
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names, NoPreamble());
  model.SetStart(100);
  for (auto e : {Enter(1, 110, 5, 0), Exit(1, 120, 5, 0), Exit(1, 150, 9, 0)}) model.OnOpEvent(e);
  model.FinishThreads(200);
  ASSERT_EQ(sink.trees.size(), 2u);
  EXPECT_EQ(sink.trees[1][0].begin_ns, 120u);
  EXPECT_EQ(sink.trees[1][0].end_ns, 150u);
  EXPECT_TRUE(sink.trees[1][0].flags & kSliceBeginUnseen);
}

TEST(OpStackModelTest, ThreadsAreSeparateAndExitClosesOpenOps) {
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names, NoPreamble());
  model.SetStart(100);
  for (auto e : {Enter(1, 110, 5, 0), Enter(11, 115, 6, 0), Exit(1, 120, 5, 0), Enter(11, 125, 7, 1)})
    model.OnOpEvent(e);
  char comm[16] = "pt_worker";
  model.OnThreadExit(10, 11, 140, comm);
  model.FinishThreads(200);
  ASSERT_EQ(sink.by_thread[11].size(), 2u);
  EXPECT_EQ(sink.by_thread[11][0].end_ns, 140u);
  EXPECT_TRUE(sink.by_thread[11][1].flags & kSliceEndUnseen);
  ASSERT_EQ(sink.threads.size(), 2u);
  // Thread 11 had no /proc name: the name seen at its exit is used.
  bool found = false;
  for (auto& t : sink.threads) found |= (t.tid == 11 && t.name == "pt_worker");
  EXPECT_TRUE(found);
}

TEST(OpStackModelTest, ReturnsWithoutEntriesOnOneFrameStaySiblings) {
  // Entries lost (ring buffer full): returns on the same frame are
  // siblings, not nested.
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names);
  model.SetStart(10);
  for (auto e : {Exit(1, 50, 5, 0), Exit(1, 60, 6, 0), Exit(1, 70, 7, 0), Enter(1, 110, 8, 0),
                 Exit(1, 120, 8, 0)})
    model.OnOpEvent(e);
  model.FinishThreads(200);
  ASSERT_EQ(sink.trees.size(), 4u);
  for (const auto& tree : sink.trees) EXPECT_EQ(tree.size(), 1u);
  EXPECT_EQ(sink.trees[0][0].end_ns, 50u);
  EXPECT_EQ(sink.trees[1][0].begin_ns, 50u);  // after its sibling, not before
  EXPECT_EQ(sink.trees[1][0].end_ns, 60u);
  EXPECT_TRUE(sink.trees[2][0].flags & kSliceBeginUnseen);
  EXPECT_EQ(sink.trees[3][0].flags, 0);
  EXPECT_EQ(model.stats().begin_repaired, 3u);
}

TEST(OpStackModelTest, ReturnsWithoutEntriesNestByFrame) {
  // A{B; C} with every entry lost: C does not enclose B, A encloses both.
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names);
  model.SetStart(10);
  for (auto e : {Exit(1, 50, 2, 1), Exit(1, 60, 3, 1), Exit(1, 70, 1, 0)}) model.OnOpEvent(e);
  model.FinishThreads(200);
  ASSERT_EQ(sink.trees.size(), 1u);
  const std::vector<Slice>& t = sink.trees[0];
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].op_id, 1u);
  EXPECT_EQ(t[1].op_id, 2u);
  EXPECT_EQ(t[1].depth, 1);
  EXPECT_EQ(t[2].op_id, 3u);
  EXPECT_EQ(t[2].depth, 1);
  EXPECT_EQ(t[2].begin_ns, 50u);
  ExpectWellFormed(t);
}

TEST(OpStackModelTest, CaughtExceptionClosesTheOpsItUnwound) {
  // A{B{C}}: C throws, A catches; B and C are unwound.
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names, NoPreamble());
  model.SetStart(10);
  tp_op_event unwind = Op(EV_OP_UNWIND, 1, 140, 0, 0);
  unwind.frame = Frame(1);  // A's body called __cxa_begin_catch: B's frame level
  for (auto e : {Enter(1, 100, 1, 0), Enter(1, 110, 2, 1), Enter(1, 120, 3, 2), unwind,
                 Exit(1, 150, 1, 0)})
    model.OnOpEvent(e);
  model.FinishThreads(200);
  ASSERT_EQ(sink.trees.size(), 1u);
  const std::vector<Slice>& t = sink.trees[0];
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].end_ns, 150u);
  EXPECT_EQ(t[0].flags, 0);
  EXPECT_EQ(t[1].end_ns, 140u);
  // Unwound is its own flag: the op did end there, nothing was repaired.
  EXPECT_EQ(t[1].flags, kSliceUnwound);
  EXPECT_EQ(t[2].end_ns, 140u);
  EXPECT_EQ(t[2].flags, kSliceUnwound);
  EXPECT_EQ(model.stats().unwound, 2u);
  EXPECT_EQ(model.stats().end_repaired, 0u);
  ExpectWellFormed(t);
}

TEST(OpStackModelTest, ACallOnAnOpenOpsFrameClosesIt) {
  // Op 5's return was not probed (a `ret` in a cold fragment): the next call
  // from the same frame shows it returned.
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names, NoPreamble());
  model.SetStart(10);
  for (auto e : {Enter(1, 100, 5, 0), Enter(1, 110, 6, 1), Exit(1, 120, 6, 1),
                 Enter(1, 130, 7, 0), Exit(1, 140, 7, 0)})
    model.OnOpEvent(e);
  model.FinishThreads(200);
  ASSERT_EQ(sink.trees.size(), 2u);
  EXPECT_EQ(sink.trees[0][0].end_ns, 130u);
  EXPECT_TRUE(sink.trees[0][0].flags & kSliceEndUnseen);
  EXPECT_EQ(sink.trees[0].size(), 2u);
  EXPECT_EQ(sink.trees[1][0].op_id, 7u);
  EXPECT_EQ(sink.trees[1][0].flags, 0);
  EXPECT_EQ(model.stats().mismatched_exits, 1u);
}

TEST(OpStackModelTest, ReturnsAfterTheStopAreLeftOut) {
  // Entry probes are removed before return probes: ops that begin in
  // between are seen only returning, after the stop.
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names, NoPreamble());
  model.SetStart(10);
  model.OnOpEvent(Enter(1, 100, 1, 0));
  model.SetStop(150);
  for (auto e : {Exit(1, 160, 5, 1), Exit(1, 170, 1, 0), Exit(1, 180, 6, 0)}) model.OnOpEvent(e);
  model.FinishThreads(200);
  EXPECT_EQ(model.stats().after_stop, 2u);
  ASSERT_EQ(sink.trees.size(), 1u);
  EXPECT_EQ(sink.trees[0].size(), 1u);
  EXPECT_EQ(sink.trees[0][0].end_ns, 170u) << "an op open at the stop still ends";
  EXPECT_EQ(model.stats().begin_repaired, 0u);
}

TEST(OpStackModelTest, ReturnsBeforeTheTraceStartAreLeftOut) {
  // Return probes go live before entry probes: ops that ran while they were
  // attached are seen only returning, before the trace starts.
  RecordingSink sink;
  FixedNames names;
  OpStackModel model(&sink, &names);
  model.SetStart(100);
  for (auto e : {Exit(1, 50, 5, 1), Enter(1, 60, 6, 1), Exit(1, 70, 6, 1), Exit(1, 120, 1, 0)})
    model.OnOpEvent(e);
  model.FinishThreads(200);
  EXPECT_EQ(model.stats().before_start, 1u);
  ASSERT_EQ(sink.trees.size(), 1u);
  const std::vector<Slice>& t = sink.trees[0];
  ASSERT_EQ(t.size(), 2u);  // op 1 (open at the start) encloses op 6, whose entry was seen
  EXPECT_EQ(t[0].op_id, 1u);
  EXPECT_EQ(t[0].begin_ns, 60u);
  EXPECT_EQ(t[1].op_id, 6u);
  ExpectWellFormed(t);
}

}  // namespace
}  // namespace torchprobe
