// The event decoder: typed dispatch, and unknown or short records skipped
// and counted rather than misread.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "userspace/collect/event_decoder.h"

namespace torchprobe {
namespace {

class CountingHandler : public EventHandler {
 public:
  void OnOpEvent(const tp_op_event& e) override { ops.push_back(e); }
  void OnProcEvent(const tp_proc_event& e) override { procs.push_back(e); }
  void OnBoxedEvent(const tp_boxed_event& e) override { boxed.push_back(e); }
  std::vector<tp_op_event> ops;
  std::vector<tp_proc_event> procs;
  std::vector<tp_boxed_event> boxed;
};

TEST(EventDecoderTest, DecodesOpAndProcEvents) {
  CountingHandler handler;
  DecodeStats stats;
  tp_op_event op = {};
  op.hdr = {EV_OP_ENTER, sizeof(op), 42, 43, 1, 123456};
  op.op_id = 77;
  EXPECT_TRUE(DecodeRecord(&op, sizeof(op), &handler, &stats));
  tp_proc_event proc = {};
  proc.hdr = {EV_PROC_EXIT, sizeof(proc), 42, 44, 0, 200};
  proc.is_leader = 1;
  std::strcpy(proc.comm, "python3");
  EXPECT_TRUE(DecodeRecord(&proc, sizeof(proc), &handler, &stats));
  ASSERT_EQ(handler.ops.size(), 1u);
  EXPECT_EQ(handler.ops[0].op_id, 77u);
  EXPECT_EQ(handler.ops[0].hdr.tid, 43u);
  EXPECT_EQ(handler.ops[0].hdr.ts_ns, 123456u);
  ASSERT_EQ(handler.procs.size(), 1u);
  EXPECT_STREQ(handler.procs[0].comm, "python3");
  EXPECT_EQ(stats.decoded, 2u);
}

// Exec events reach the session (a launched command that execs into a
// chroot is found through them); memory events reach their handlers.
TEST(EventDecoderTest, DecodesExecAndMemoryEvents) {
  struct MemoryHandler : CountingHandler {
    void OnMemEvent(const tp_mem_event& e) override { mem.push_back(e); }
    void OnDeviceMemEvent(const tp_device_mem_event& e) override { device.push_back(e); }
    std::vector<tp_mem_event> mem;
    std::vector<tp_device_mem_event> device;
  } handler;
  DecodeStats stats;
  tp_proc_event exec = {};
  exec.hdr = {EV_PROC_EXEC, sizeof(exec), 42, 42, 0, 100};
  EXPECT_TRUE(DecodeRecord(&exec, sizeof(exec), &handler, &stats));
  tp_mem_event alloc = {};
  alloc.hdr = {EV_MEM_ALLOC, sizeof(alloc), 42, 43, 0, 200};
  alloc.address = 0x1000;
  alloc.bytes = 64;
  EXPECT_TRUE(DecodeRecord(&alloc, sizeof(alloc), &handler, &stats));
  tp_device_mem_event block = {};
  block.hdr = {EV_DEVICE_MEM, sizeof(block), 42, 43, 0, 300};
  block.bytes = -512;
  block.device_index = 1;
  EXPECT_TRUE(DecodeRecord(&block, sizeof(block), &handler, &stats));
  ASSERT_EQ(handler.procs.size(), 1u);
  EXPECT_EQ(handler.procs[0].hdr.type, EV_PROC_EXEC);
  ASSERT_EQ(handler.mem.size(), 1u);
  EXPECT_EQ(handler.mem[0].bytes, 64u);
  ASSERT_EQ(handler.device.size(), 1u);
  EXPECT_EQ(handler.device[0].bytes, -512);
  EXPECT_EQ(handler.device[0].device_index, 1);
  EXPECT_EQ(stats.unknown, 0u);
}

// Launch mode follows a command into another dynamic loader by its exec
// events: they must reach the handler.
TEST(EventDecoderTest, DecodesExecAndBoxedEvents) {
  CountingHandler handler;
  DecodeStats stats;
  tp_proc_event exec = {};
  exec.hdr = {EV_PROC_EXEC, sizeof(exec), 42, 42, 0, 100};
  std::strcpy(exec.comm, "python3");
  EXPECT_TRUE(DecodeRecord(&exec, sizeof(exec), &handler, &stats));
  tp_boxed_event boxed = {};
  boxed.hdr = {EV_BOXED_ENTER, sizeof(boxed), 42, 42, 0, 200};
  boxed.op_id = 3000;
  boxed.frame = 0x7ffc0000;
  std::strcpy(boxed.name, "aten::mm");
  EXPECT_TRUE(DecodeRecord(&boxed, sizeof(boxed), &handler, &stats));
  EXPECT_FALSE(DecodeRecord(&boxed, sizeof(tp_op_event), &handler, &stats));  // cut short
  ASSERT_EQ(handler.procs.size(), 1u);
  EXPECT_EQ(handler.procs[0].hdr.type, EV_PROC_EXEC);
  ASSERT_EQ(handler.boxed.size(), 1u);
  EXPECT_STREQ(handler.boxed[0].name, "aten::mm");
  EXPECT_EQ(handler.boxed[0].op_id, 3000u);
  EXPECT_EQ(stats.malformed, 1u);
}

// Collectives and autograd nodes are event types of their own; a handler
// that does not take them gets their op entry.
TEST(EventDecoderTest, DecodesCollectiveAndAutogradNodeEvents) {
  struct Handler : CountingHandler {
    void OnCollective(const tp_collective_event& e) override { collectives.push_back(e); }
    std::vector<tp_collective_event> collectives;
  } handler;
  DecodeStats stats;
  tp_collective_event collective = {};
  collective.op.hdr = {EV_COLLECTIVE, sizeof(collective), 42, 43, 0, 100};
  collective.op.op_id = 7;
  collective.rank = 1;
  collective.group_size = 2;
  EXPECT_TRUE(DecodeRecord(&collective, sizeof(collective), &handler, &stats));
  EXPECT_FALSE(DecodeRecord(&collective, sizeof(tp_op_event), &handler, &stats));  // cut short
  tp_autograd_node_event node = {};
  node.op.hdr = {EV_AUTOGRAD_NODE, sizeof(node), 42, 43, 0, 200};
  node.op.op_id = 9;
  node.op.frame = 0x7ffc0000;
  node.vtable = 0x1000;
  EXPECT_TRUE(DecodeRecord(&node, sizeof(node), &handler, &stats));
  ASSERT_EQ(handler.collectives.size(), 1u);
  EXPECT_EQ(handler.collectives[0].group_size, 2);
  ASSERT_EQ(handler.ops.size(), 1u) << "the node's entry, by default";
  EXPECT_EQ(handler.ops[0].hdr.type, EV_OP_ENTER);
  EXPECT_EQ(handler.ops[0].hdr.size, sizeof(tp_op_event));
  EXPECT_EQ(handler.ops[0].op_id, 9u);
  EXPECT_EQ(handler.ops[0].frame, 0x7ffc0000u);
  EXPECT_EQ(stats.malformed, 1u);
  EXPECT_EQ(stats.decoded, 2u);
}

TEST(EventDecoderTest, SkipsUnknownTypesBySize) {
  CountingHandler handler;
  DecodeStats stats;
  unsigned char record[64] = {};
  tp_event_header header = {99, sizeof(record), 1, 1, 0, 5};
  std::memcpy(record, &header, sizeof(header));
  EXPECT_FALSE(DecodeRecord(record, sizeof(record), &handler, &stats));
  EXPECT_EQ(stats.unknown, 1u);
  EXPECT_TRUE(handler.ops.empty());
}

TEST(EventDecoderTest, RejectsShortRecords) {
  CountingHandler handler;
  DecodeStats stats;
  tp_op_event op = {};
  op.hdr = {EV_OP_EXIT, sizeof(op), 1, 1, 0, 5};
  EXPECT_FALSE(DecodeRecord(&op, 10, &handler, &stats));           // shorter than a header
  op.hdr.size = sizeof(tp_event_header);                            // header claims too little
  EXPECT_FALSE(DecodeRecord(&op, sizeof(op), &handler, &stats));
  op.hdr.size = 200;                                                // claims more than the record
  EXPECT_FALSE(DecodeRecord(&op, sizeof(op), &handler, &stats));
  EXPECT_EQ(stats.malformed, 3u);
  EXPECT_TRUE(handler.ops.empty());
}

}  // namespace
}  // namespace torchprobe
