// 13.6: a collective entry's reads (bpf/cuda.bpf.h read_collective_args) as
// slice args: what is consistent is shown, what is not is left out.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "bpf/events.h"
#include "userspace/model/collective_args.h"

namespace torchprobe {
namespace {

tp_cuda_call_event Entry(uint32_t layout, uint64_t group, int32_t rank, int32_t size, uint64_t tensors) {
  tp_cuda_call_event event = {};
  event.op.pad = layout;
  event.stack[0] = group;
  event.stack[1] = static_cast<uint32_t>(rank) | uint64_t{static_cast<uint32_t>(size)} << 32;
  event.stack[2] = tensors;
  event.regs[4] = 3 * 1024;   // summed numel
  event.regs[5] = 0x10000 | 6;  // one dtype: Float
  return event;
}

std::map<std::string, std::string> Args(std::string_view op, const tp_cuda_call_event& event) {
  std::map<std::string, std::string> got;
  for (const SliceArg& a : CollectiveArgs(op, event)) got[a.name] = a.is_text ? a.text : std::to_string(a.number);
  return got;
}

TEST(CollectiveArgsTest, GroupRankSizeAndTensorsOfAnAllReduce) {
  tp_cuda_call_event event = Entry(TP_COLLECTIVE_BY_THIS, 0x5500aa, 1, 4, 2);
  EXPECT_TRUE(IsCollectiveCall(event));
  EXPECT_EQ(Args("c10d::allreduce_", event),
            (std::map<std::string, std::string>{
                {"process_group", "0x5500aa"}, {"rank", "1"}, {"group_size", "4"}, {"tensors", "2"},
                {"bytes", "12288"}}));
  event.regs[5] = 6;  // mixed dtypes: no bytes
  EXPECT_EQ(Args("c10d::allreduce_", event).count("bytes"), 0u);
}

TEST(CollectiveArgsTest, OpsWithoutATensorListFirstGetNoTensorCount) {
  // allgather's first argument is the output list of lists: stack[2] is not a count.
  auto got = Args("c10d::allgather_", Entry(TP_COLLECTIVE_BY_HOLDER, 0x10, 0, 2, 7));
  EXPECT_EQ(got.count("tensors"), 0u);
  EXPECT_EQ(got["rank"], "0");
}

TEST(CollectiveArgsTest, InconsistentOrUnreadGroupsAreLeftOut) {
  EXPECT_TRUE(Args("c10d::barrier", Entry(TP_COLLECTIVE_BY_THIS, 0, 0, 0, 0)).empty()) << "unread";
  EXPECT_TRUE(Args("c10d::barrier", Entry(TP_COLLECTIVE_BY_THIS, 0x10, 2, 2, 0)).empty()) << "rank >= size";
  EXPECT_TRUE(Args("c10d::barrier", Entry(TP_COLLECTIVE_BY_THIS, 0x10, -1, 2, 0)).empty()) << "negative";
  EXPECT_FALSE(IsCollectiveCall(Entry(TP_COLLECTIVE_NONE, 0x10, 0, 2, 1))) << "a CUDA call";
}

}  // namespace
}  // namespace torchprobe
