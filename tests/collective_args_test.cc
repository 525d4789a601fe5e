// 13.6: a collective entry's reads (bpf/collectives.bpf.c) as
// slice args: what is consistent is shown, what is not is left out.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "bpf/events.h"
#include "userspace/model/collective_args.h"

namespace torchprobe {
namespace {

tp_collective_event Entry(uint64_t group, int32_t rank, int32_t size, uint64_t tensors) {
  tp_collective_event event = {};
  event.op.hdr.type = EV_COLLECTIVE;
  event.group = group;
  event.rank = rank;
  event.group_size = size;
  event.tensors = tensors;
  event.numel = 3 * 1024;  // summed numel
  event.dtype = 6;         // Float
  event.one_dtype = 1;
  return event;
}

std::map<std::string, std::string> Args(std::string_view op, const tp_collective_event& event) {
  std::map<std::string, std::string> got;
  for (const SliceArg& a : CollectiveArgs(op, event)) got[a.name] = a.is_text ? a.text : std::to_string(a.number);
  return got;
}

TEST(CollectiveArgsTest, GroupRankSizeAndTensorsOfAnAllReduce) {
  tp_collective_event event = Entry(0x5500aa, 1, 4, 2);
  EXPECT_EQ(Args("c10d::allreduce_", event),
            (std::map<std::string, std::string>{
                {"process_group", "0x5500aa"}, {"rank", "1"}, {"group_size", "4"}, {"tensors", "2"},
                {"bytes", "12288"}}));
  event.one_dtype = 0;  // mixed dtypes: no bytes
  EXPECT_EQ(Args("c10d::allreduce_", event).count("bytes"), 0u);
}

TEST(CollectiveArgsTest, OpsWithoutATensorListFirstGetNoTensorCount) {
  // allgather's first argument is the output list of lists: stack[2] is not a count.
  auto got = Args("c10d::allgather_", Entry(0x10, 0, 2, 7));
  EXPECT_EQ(got.count("tensors"), 0u);
  EXPECT_EQ(got["rank"], "0");
}

TEST(CollectiveArgsTest, InconsistentOrUnreadGroupsAreLeftOut) {
  EXPECT_TRUE(Args("c10d::barrier", Entry(0, 0, 0, 0)).empty()) << "unread";
  EXPECT_TRUE(Args("c10d::barrier", Entry(0x10, 2, 2, 0)).empty()) << "rank >= size";
  EXPECT_TRUE(Args("c10d::barrier", Entry(0x10, -1, 2, 0)).empty()) << "negative";
}

}  // namespace
}  // namespace torchprobe
