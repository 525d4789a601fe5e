// The event router: each type to the handlers registered for it, in order;
// unknown or short records skipped and counted rather than misread.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "userspace/collect/event_router.h"

namespace torchprobe {
namespace {

// What a session with ops, processes and boxed calls registers.
struct Recorded {
  explicit Recorded(EventRouter& router) {
    router.On<tp_op_event>({EV_OP_ENTER, EV_OP_EXIT, EV_OP_UNWIND, EV_OP_RESTORED},
                           [this](const tp_op_event& e) { ops.push_back(e); });
    router.On<tp_proc_event>({EV_LIB_LOAD, EV_PROC_FORK, EV_PROC_EXEC, EV_PROC_EXIT},
                             [this](const tp_proc_event& e) { procs.push_back(e); });
    router.On<tp_boxed_event>({EV_BOXED_ENTER}, [this](const tp_boxed_event& e) { boxed.push_back(e); });
  }
  std::vector<tp_op_event> ops;
  std::vector<tp_proc_event> procs;
  std::vector<tp_boxed_event> boxed;
};

TEST(EventRouterTest, RoutesOpAndProcEvents) {
  EventRouter router;
  Recorded got(router);
  tp_op_event op = {};
  op.hdr = {EV_OP_ENTER, sizeof(op), 42, 43, 1, 123456};
  op.op_id = 77;
  EXPECT_TRUE(router.Route(&op, sizeof(op)));
  tp_proc_event proc = {};
  proc.hdr = {EV_PROC_EXIT, sizeof(proc), 42, 44, 0, 200};
  proc.is_leader = 1;
  std::strcpy(proc.comm, "python3");
  EXPECT_TRUE(router.Route(&proc, sizeof(proc)));
  ASSERT_EQ(got.ops.size(), 1u);
  EXPECT_EQ(got.ops[0].op_id, 77u);
  EXPECT_EQ(got.ops[0].hdr.tid, 43u);
  EXPECT_EQ(got.ops[0].hdr.ts_ns, 123456u);
  ASSERT_EQ(got.procs.size(), 1u);
  EXPECT_STREQ(got.procs[0].comm, "python3");
  EXPECT_EQ(router.stats().decoded, 2u);
}

// Exec events reach the session (a launched command that execs into a
// chroot is found through them); memory events reach their set.
TEST(EventRouterTest, RoutesExecAndMemoryEvents) {
  EventRouter router;
  Recorded got(router);
  std::vector<tp_mem_event> mem;
  std::vector<tp_device_mem_event> device;
  router.On<tp_mem_event>({EV_MEM_ALLOC, EV_MEM_FREE}, [&](const tp_mem_event& e) { mem.push_back(e); });
  router.On<tp_device_mem_event>({EV_DEVICE_MEM}, [&](const tp_device_mem_event& e) { device.push_back(e); });
  tp_proc_event exec = {};
  exec.hdr = {EV_PROC_EXEC, sizeof(exec), 42, 42, 0, 100};
  EXPECT_TRUE(router.Route(&exec, sizeof(exec)));
  tp_mem_event alloc = {};
  alloc.hdr = {EV_MEM_ALLOC, sizeof(alloc), 42, 43, 0, 200};
  alloc.address = 0x1000;
  alloc.bytes = 64;
  EXPECT_TRUE(router.Route(&alloc, sizeof(alloc)));
  tp_device_mem_event block = {};
  block.hdr = {EV_DEVICE_MEM, sizeof(block), 42, 43, 0, 300};
  block.bytes = -512;
  block.device_index = 1;
  EXPECT_TRUE(router.Route(&block, sizeof(block)));
  ASSERT_EQ(got.procs.size(), 1u);
  EXPECT_EQ(got.procs[0].hdr.type, EV_PROC_EXEC);
  ASSERT_EQ(mem.size(), 1u);
  EXPECT_EQ(mem[0].bytes, 64u);
  ASSERT_EQ(device.size(), 1u);
  EXPECT_EQ(device[0].bytes, -512);
  EXPECT_EQ(device[0].device_index, 1);
  EXPECT_EQ(router.stats().unknown, 0u);
}

TEST(EventRouterTest, RoutesBoxedEventsAndRefusesThemCutShort) {
  EventRouter router;
  Recorded got(router);
  tp_boxed_event boxed = {};
  boxed.hdr = {EV_BOXED_ENTER, sizeof(boxed), 42, 42, 0, 200};
  boxed.op_id = 3000;
  boxed.frame = 0x7ffc0000;
  std::strcpy(boxed.name, "aten::mm");
  EXPECT_TRUE(router.Route(&boxed, sizeof(boxed)));
  boxed.hdr.size = sizeof(tp_op_event);
  EXPECT_FALSE(router.Route(&boxed, sizeof(tp_op_event)));  // cut short
  ASSERT_EQ(got.boxed.size(), 1u);
  EXPECT_STREQ(got.boxed[0].name, "aten::mm");
  EXPECT_EQ(got.boxed[0].op_id, 3000u);
  EXPECT_EQ(router.stats().malformed, 1u);
}

// Several handlers of one type run in the order they registered: a set
// takes a CUDA call's arguments, then the session opens its op's slice.
TEST(EventRouterTest, HandlersOfATypeRunInTheirOrder) {
  EventRouter router;
  std::vector<int> order;
  router.On<tp_collective_event>({EV_COLLECTIVE}, [&](const tp_collective_event& e) {
    EXPECT_EQ(e.group_size, 2);
    order.push_back(1);
  });
  router.On<tp_collective_event>({EV_COLLECTIVE}, [&](const tp_collective_event& e) {
    tp_op_event entry = EventRouter::EntryOf(e.op);
    EXPECT_EQ(entry.hdr.type, EV_OP_ENTER);
    EXPECT_EQ(entry.hdr.size, sizeof(tp_op_event));
    EXPECT_EQ(entry.op_id, 7u);
    order.push_back(2);
  });
  tp_collective_event collective = {};
  collective.op.hdr = {EV_COLLECTIVE, sizeof(collective), 42, 43, 0, 100};
  collective.op.op_id = 7;
  collective.rank = 1;
  collective.group_size = 2;
  EXPECT_TRUE(router.Route(&collective, sizeof(collective)));
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  collective.op.hdr.size = sizeof(tp_op_event);
  EXPECT_FALSE(router.Route(&collective, sizeof(tp_op_event)));  // cut short: no handler runs
  EXPECT_EQ(order.size(), 2u);
  EXPECT_EQ(router.stats().malformed, 1u);
}

// A type no one registered (a newer BPF object, or a capability not asked
// for) is skipped whole, by the size its header gives.
TEST(EventRouterTest, SkipsTypesNoOneAskedFor) {
  EventRouter router;
  Recorded got(router);
  unsigned char record[64] = {};
  tp_event_header header = {99, sizeof(record), 1, 1, 0, 5};
  std::memcpy(record, &header, sizeof(header));
  EXPECT_FALSE(router.Route(record, sizeof(record)));
  tp_autograd_node_event node = {};
  node.op.hdr = {EV_AUTOGRAD_NODE, sizeof(node), 42, 43, 0, 200};
  EXPECT_FALSE(router.Route(&node, sizeof(node)));
  EXPECT_EQ(router.stats().unknown, 2u);
  EXPECT_TRUE(got.ops.empty());
}

TEST(EventRouterTest, RejectsShortRecords) {
  EventRouter router;
  Recorded got(router);
  tp_op_event op = {};
  op.hdr = {EV_OP_EXIT, sizeof(op), 1, 1, 0, 5};
  EXPECT_FALSE(router.Route(&op, 10));           // shorter than a header
  op.hdr.size = sizeof(tp_event_header);         // header claims too little
  EXPECT_FALSE(router.Route(&op, sizeof(op)));
  op.hdr.size = 200;                             // claims more than the record
  EXPECT_FALSE(router.Route(&op, sizeof(op)));
  EXPECT_EQ(router.stats().malformed, 3u);
  EXPECT_TRUE(got.ops.empty());
}

}  // namespace
}  // namespace torchprobe
