// Who may send GPU records to torchprobe: its CUPTI socket is in the
// abstract namespace, listed in /proc/net/unix, so any local process can
// send to it. Only the run's own processes are heard (the kernel names each
// datagram's sender); the others are refused and counted, and nothing they
// send reaches the trace or root's terminal. End to end (root, no GPU):
// a process that is not traced forges a hello, activities, a note and a
// flood for the traced cupti_loop while `record --cupti` runs; collectors
// in a launched command's children are heard. Then the receiver alone
// (no root): who is accepted, held, forgotten; notes made printable; every
// queue bounded and what does not fit counted.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cupti_stream_text.h"
#include "tests/fakes.h"
#include "tests/scratch_test.h"
#include "tests/test_support.h"
#include "userspace/base/clock.h"
#include "userspace/base/proc_maps.h"
#include "userspace/cupti/record_receiver.h"
#include "userspace/cupti/record_stream.h"
#include "userspace/model/gpu_join.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

using Bytes = std::vector<uint8_t>;

std::string Collector() {
  std::string binary = test::TorchprobeBinary();
  return binary.substr(0, binary.rfind('/')) + "/libtorchprobe_cupti.so";
}

// Records from golden-stream text (tests/cupti_stream_text.h).
Bytes Records(const std::string& text) {
  test::GoldenStream stream;
  std::string error;
  EXPECT_TRUE(test::ParseGoldenStream(text, &stream, &error)) << error;
  return stream.records;
}

Bytes Note(uint32_t pid, const std::string& text) {
  tpc_header hdr{TPC_NOTE, static_cast<uint16_t>(sizeof(tpc_header) + text.size()), pid};
  Bytes note(hdr.size);
  std::memcpy(note.data(), &hdr, sizeof(hdr));
  std::memcpy(note.data() + sizeof(hdr), text.data(), text.size());
  return note;
}

std::string Kernel(uint32_t pid, uint32_t correlation, const std::string& name, uint64_t start_ns = 1000) {
  return "kernel " + std::to_string(pid) + " start=" + std::to_string(start_ns) + " end=" +
         std::to_string(start_ns + 500) + " corr=" + std::to_string(correlation) +
         " device=0 context=1 stream=7 grid=1,1,1 block=1,1,1 name=" + name + "\n";
}

// A datagram as full as a collector's (TPC_MAX_DATAGRAM) of kernels named `name`.
Bytes FullOfKernels(uint32_t pid, const std::string& name) {
  Bytes one = Records(Kernel(pid, 1, name)), datagram;
  while (datagram.size() + one.size() <= TPC_MAX_DATAGRAM) datagram.insert(datagram.end(), one.begin(), one.end());
  return datagram;
}

// Sends each of `datagrams` to the socket at `address` ("@name"), waiting
// for room; false if one could not be sent.
bool SendTo(const std::string& address, const std::vector<Bytes>& datagrams) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, address.data() + 1, address.size() - 1);
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
  timeval wait{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof(wait));
  bool sent = connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0;
  for (size_t i = 0; sent && i < datagrams.size(); ++i)
    sent = send(fd, datagrams[i].data(), datagrams[i].size(), 0) == static_cast<ssize_t>(datagrams[i].size());
  close(fd);
  return sent;
}

// The CUPTI socket of the torchprobe with pid `tracer`, from /proc/net/unix
// (as anyone on the host can read it), or "".
std::string CuptiSocketOf(pid_t tracer) {
  std::string prefix = "@torchprobe-cupti-" + std::to_string(tracer) + "-";
  std::istringstream table(test::ReadFile("/proc/net/unix"));
  for (std::string line; std::getline(table, line);) {
    size_t at = line.find(prefix);
    if (at != std::string::npos) return line.substr(at);
  }
  return "";
}

// A child of `parent` running `comm`, or 0.
uint32_t ChildNamed(pid_t parent, const std::string& comm) {
  for (uint32_t pid : ListDescendants(static_cast<uint32_t>(parent)))
    if (ReadParentPid(pid) == static_cast<uint32_t>(parent) &&
        test::ReadFile("/proc/" + std::to_string(pid) + "/comm") == comm + "\n")
      return pid;
  return 0;
}

// The number in cupti_loop's last "step N ..." or "done N ..." line.
long LoopSteps(const std::string& out) {
  long steps = 0;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("step ", 0) == 0 || line.rfind("done ", 0) == 0) steps = std::stol(line.substr(5));
  return steps;
}

class CuptiSenderTest : public test::ScratchTest {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    if (!test::FileExists(test::FixturePath("cuda/cupti_loop")) || !test::FileExists(Collector()))
      GTEST_SKIP() << "fixtures or the collector not built (make test)";
    ScratchTest::SetUp();
  }
};

// While `record --cupti` traces cupti_loop, this test's process (not one
// the run traces) sends what an attacker would: a hello that would shift
// the loop's clock by 1000 s, kernels in the loop's name, a note meant for
// root's terminal, and a flood larger than anything torchprobe holds.
TEST_F(CuptiSenderTest, ForgedDatagramsAreRefusedCountedAndAbsent) {
  std::string stop = dir_ + "/stop", out = dir_ + "/loop.out", err = dir_ + "/tp.err", trace = dir_ + "/t.pftrace";
  pid_t tracer = test::Spawn({"sh", "-c", "exec \"$0\" record --cupti -o \"$1\" -- \"$2\" --until \"$3\" 2>\"$4\"",
                              test::TorchprobeBinary(), trace, test::FixturePath("cuda/cupti_loop"), stop, err},
                             out);
  spawned_.push_back(tracer);
  ASSERT_TRUE(test::WaitUntil([&] { return LoopSteps(test::ReadFile(out)) >= 2; }, 120)) << test::ReadFile(err);
  std::string address = CuptiSocketOf(tracer);
  ASSERT_FALSE(address.empty()) << "no CUPTI socket of pid " << tracer << " in /proc/net/unix";
  uint32_t loop = ChildNamed(tracer, "cupti_loop");
  ASSERT_NE(loop, 0u);

  uint64_t now = NowNs();
  std::vector<Bytes> forged = {
      Records("hello " + std::to_string(loop) + " clock=offset offset=1000000000000\n"),
      Records(Kernel(loop, 1, "forged_kernel", now) + Kernel(loop, 2, "forged_kernel", now + 1000)),
      Note(loop, "\x1b]0;owned\x07\x1b[2J\nforged note line"),
  };
  constexpr size_t kFlood = 800;  // 25 MiB: more than the receiver holds for an unnamed sender
  Bytes flood = FullOfKernels(loop, "flood_kernel");
  for (size_t i = 0; i < kFlood; ++i) forged.push_back(flood);
  ASSERT_TRUE(SendTo(address, forged));

  test::WriteFile(stop, "");
  ASSERT_EQ(test::Wait(tracer), 0) << test::ReadFile(err);
  long steps = LoopSteps(test::ReadFile(out));
  DecodedTrace t;
  std::string error;
  ASSERT_TRUE(ReadTrace(trace, &t, &error)) << error;
  size_t forged_found = std::count_if(t.gpu.begin(), t.gpu.end(), [](const DecodedGpuActivity& g) {
    return g.name == "forged_kernel" || g.name == "flood_kernel";
  });
  EXPECT_EQ(forged_found, 0u);
  // Every record of the loop, on its own clock (a shifted one joins nothing).
  EXPECT_EQ(t.stats.gpu_processes, 1u);
  EXPECT_EQ(t.stats.gpu_activities, 200u * steps);
  EXPECT_EQ(t.stats.gpu_api_calls, 200u * steps);
  EXPECT_EQ(t.stats.gpu_unjoined, 0u);
  EXPECT_EQ(t.stats.gpu_queue_full, 0u);
  // Refused and counted, in the stats, the summary and the report.
  EXPECT_EQ(t.stats.gpu_refused_datagrams, forged.size());
  std::string said = test::ReadFile(err);
  EXPECT_EQ(said.find('\x1b'), std::string::npos) << said;
  EXPECT_EQ(said.find("forged note"), std::string::npos) << said;
  std::string refused = std::to_string(forged.size()) + " datagrams from processes";
  EXPECT_NE(said.find("CUPTI socket: " + refused + " it does not trace refused"), std::string::npos) << said;
  test::CommandResult report = test::RunCommand({test::TorchprobeBinary(), "report", trace});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("CUPTI socket: " + refused + " the run does not trace refused"), std::string::npos)
      << report.out;
}

// The collectors of a launched command's children are heard, a grandchild
// that outlives its parent (a background job of a subshell) too, whether
// its first records come before or after the session read its fork.
TEST_F(CuptiSenderTest, CollectorsOfTheLaunchedTreeAreHeard) {
  std::string trace = dir_ + "/tree.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "record", "--cupti", "-o", trace, "--", "sh",
                                            "-c", "(\"$0\" 40 &); \"$0\" 60; wait",
                                            test::FixturePath("cuda/cupti_loop")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  DecodedTrace t;
  std::string error;
  ASSERT_TRUE(ReadTrace(trace, &t, &error)) << error;
  EXPECT_EQ(t.stats.gpu_processes, 2u);
  EXPECT_EQ(t.stats.gpu_activities, 2u * (40 + 60));
  EXPECT_EQ(t.stats.gpu_unjoined, 0u);
  EXPECT_EQ(t.stats.gpu_refused_datagrams, 0u);
  EXPECT_EQ(t.stats.gpu_queue_full, 0u);
}

// A child of this test that sends, each time it is asked, the next batch
// of datagrams to the receiver (prepared before the fork: the child only
// makes system calls).
class ChildSender {
 public:
  ChildSender(const std::string& address, std::vector<std::vector<Bytes>> batches) : batches_(std::move(batches)) {
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(to_child[1]);
      close(from_child[0]);
      for (uint8_t batch; read(to_child[0], &batch, 1) == 1;) {
        uint8_t sent = batch < batches_.size() && SendTo(address, batches_[batch]);
        if (write(from_child[1], &sent, 1) != 1) break;
      }
      _exit(0);
    }
    close(to_child[0]);
    close(from_child[1]);
    ask_ = to_child[1];
    told_ = from_child[0];
  }
  ~ChildSender() { Exit(); }
  // Once it returns, the batch is in the receiver's socket.
  bool Send(uint8_t batch) {
    uint8_t sent = 0;
    return write(ask_, &batch, 1) == 1 && read(told_, &sent, 1) == 1 && sent == 1;
  }
  void Exit() {
    if (ask_ >= 0) close(ask_), close(told_);
    ask_ = told_ = -1;
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  uint32_t pid() const { return static_cast<uint32_t>(pid_); }

 private:
  std::vector<std::vector<Bytes>> batches_;
  pid_t pid_ = -1;
  int ask_ = -1, told_ = -1;
};


// The receiver alone on its socket, its senders this test's children; what
// the run would name (the session, or --inject-cupti's injection) is named
// by the test.
class CuptiReceiverSendersTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }
  void Start(const ReceiverBounds& bounds, bool quiet = true) {
    receiver_ = std::make_unique<CuptiReceiver>(&join_, quiet, bounds);
    ASSERT_TRUE(receiver_->Listen().ok());
  }
  std::unique_ptr<ChildSender> Sender(std::vector<std::vector<Bytes>> batches) {
    return std::make_unique<ChildSender>(receiver_->address(), std::move(batches));
  }
  // A sender of a kernel named `first`, then (at Send(1)) one named `second`.
  std::unique_ptr<ChildSender> TwoKernels(const std::string& first, const std::string& second) {
    return Sender({{Records(Kernel(1, 1, first))}, {Records(Kernel(1, 2, second))}});
  }
  // Once everything sent is read: the kernel named `heard` reached the
  // join, the one named `refused` did not, and was counted.
  void ExpectHeardAndRefused(const std::string& heard, const std::string& refused) {
    TraceStats stats = Finish();
    EXPECT_EQ(collected_.Count(heard), 1u);
    EXPECT_EQ(collected_.Count(refused), 0u);
    EXPECT_EQ(stats.gpu_refused_datagrams, 1u);
  }
  // What reached the join, and the counts, once everything sent is read.
  TraceStats Finish() {
    receiver_->Drain(0, 0);
    TraceStats stats;
    join_.Emit(&collected_, &stats);
    receiver_->PutStats(&stats);
    return stats;
  }
  GpuJoin join_;
  std::unique_ptr<CuptiReceiver> receiver_;
  test::GpuActivities collected_;
};

// An injected process (or one launched) is accepted: its records are heard,
// on its own pid and clock. Another process' records naming it, and its
// hello with another clock, are refused.
TEST_F(CuptiReceiverSendersTest, TheRunsProcessIsHeardAnotherIsRefused) {
  auto own = Sender({{Records("hello 1 clock=monotonic\n" + Kernel(1, 1, "own_kernel"))}});
  receiver_->Accept(own->pid(), 0);
  std::string pid = std::to_string(own->pid());
  auto other = Sender({{Records("hello " + pid + " clock=offset offset=1000000000000\n"),
                        Records(Kernel(own->pid(), 2, "forged_kernel"))}});
  ASSERT_TRUE(own->Send(0));
  ASSERT_TRUE(other->Send(0));
  TraceStats stats = Finish();
  ASSERT_EQ(collected_.activities.size(), 1u);
  const GpuActivity& a = collected_.activities[0];
  EXPECT_EQ(a.name, "own_kernel");
  EXPECT_EQ(a.pid, own->pid());  // the kernel's word, not the header's 1
  EXPECT_EQ(a.start_ns, 1000u);  // its own clock: no offset
  EXPECT_EQ(stats.gpu_processes, 1u);
  EXPECT_EQ(stats.gpu_refused_datagrams, 2u);
}

// A grandchild whose first records come before the session read its fork:
// held, then heard once named. A sender never named is refused at the
// first turn that read every fork made before it sent.
TEST_F(CuptiReceiverSendersTest, AnUnnamedSenderIsHeldUntilTheSessionKnows) {
  auto early = Sender({{Records("hello 1 clock=monotonic\n" + Kernel(1, 1, "early_kernel"))}});
  auto stranger = Sender({{Records(Kernel(1, 1, "stranger_kernel"))}});
  ASSERT_TRUE(early->Send(0));
  ASSERT_TRUE(stranger->Send(0));
  receiver_->Poll(0);  // no fork read yet: both wait
  receiver_->Accept(early->pid(), 0);
  uint64_t refused = 0;
  EXPECT_TRUE(test::WaitUntil(
      [&] {
        receiver_->Poll(NowNs());
        TraceStats stats;
        receiver_->PutStats(&stats);
        refused += stats.gpu_refused_datagrams;
        return refused == 1;
      },
      10));
  TraceStats stats = Finish();
  EXPECT_EQ(collected_.Count("early_kernel"), 1u);
  EXPECT_EQ(collected_.Count("stranger_kernel"), 0u);
  EXPECT_EQ(refused + stats.gpu_refused_datagrams, 1u);
}

// What a pid sent before the process the session named was forked had
// that pid (a process that exited, its pid reused) is not its.
TEST_F(CuptiReceiverSendersTest, WhatCameBeforeTheForkIsNotTheChilds) {
  auto sender = TwoKernels("before_fork", "after_fork");
  ASSERT_TRUE(sender->Send(0));
  receiver_->Accept(1, 0);  // the session names another process: the socket is read meanwhile
  receiver_->Accept(sender->pid(), NowNs());
  ASSERT_TRUE(sender->Send(1));
  ExpectHeardAndRefused("after_fork", "before_fork");
}

// A process of the run exited: what it sent before is kept, and its pid,
// which another process may get, is not heard any more.
TEST_F(CuptiReceiverSendersTest, AnExitedProcessPidIsRefused) {
  auto sender = TwoKernels("before_exit", "after_exit");
  receiver_->Accept(sender->pid(), 0);
  ASSERT_TRUE(sender->Send(0));
  receiver_->Forget(sender->pid());
  ASSERT_TRUE(sender->Send(1));
  ExpectHeardAndRefused("before_exit", "after_exit");
}

// A note from a target is said as printable ASCII on one line, cut, each
// distinct one once, at most `notes` of them; the rest are counted.
TEST_F(CuptiReceiverSendersTest, NotesArePrintableOneLineAndBounded) {
  ReceiverBounds bounds;
  bounds.notes = 3;
  Start(bounds, false);
  std::string escapes = "\x1b]0;owned\x07\x1b[2Jred\r\nforged: line", long_note(1000, 'x');
  auto sender = Sender({{Note(1, escapes), Note(1, long_note), Note(1, escapes), Note(1, "three"), Note(1, "four")}});
  receiver_->Accept(sender->pid(), 0);
  ASSERT_TRUE(sender->Send(0));
  testing::internal::CaptureStderr();
  TraceStats stats = Finish();
  std::string said = testing::internal::GetCapturedStderr();
  std::string pid = "torchprobe: pid " + std::to_string(sender->pid()) + ": ";
  EXPECT_EQ(said, pid + "?]0;owned??[2Jred??forged: line\n" + pid + std::string(240, 'x') + "...\n" + pid +
                      "three\n");
  EXPECT_EQ(stats.gpu_queue_full, 1u);  // "four"
}

// Datagrams of the run's process past what the receiver holds before the
// session's loop takes them: their records counted, the rest heard.
TEST_F(CuptiReceiverSendersTest, WhatThePollCannotTakeInTimeIsCounted) {
  Bytes full = FullOfKernels(1, "flood_kernel");
  size_t per_datagram = full.size() / Records(Kernel(1, 1, "flood_kernel")).size();
  ReceiverBounds bounds;
  bounds.kept_bytes = 4 * (full.size() + 64);
  Start(bounds);
  auto sender = Sender({std::vector<Bytes>(10, full)});
  receiver_->Accept(sender->pid(), 0);
  ASSERT_TRUE(sender->Send(0));
  TraceStats stats = Finish();
  EXPECT_EQ(collected_.Count("flood_kernel"), 4 * per_datagram);
  EXPECT_EQ(stats.gpu_queue_full, 6 * per_datagram);
  EXPECT_EQ(stats.gpu_refused_datagrams, 0u);
}

// An unnamed sender's flood: held up to the bound, refused past it, and
// what was held refused when the trace ends without it named.
TEST_F(CuptiReceiverSendersTest, AnUnnamedFloodIsBoundedAndRefused) {
  Bytes full = FullOfKernels(1, "flood_kernel");
  ReceiverBounds bounds;
  bounds.held_bytes = 2 * (full.size() + 64);
  Start(bounds);
  auto sender = Sender({std::vector<Bytes>(10, full)});
  ASSERT_TRUE(sender->Send(0));
  TraceStats stats = Finish();
  EXPECT_TRUE(collected_.activities.empty());
  EXPECT_EQ(stats.gpu_refused_datagrams, 10u);
  EXPECT_EQ(stats.gpu_queue_full, 0u);
}

// Kernel names past the cache's bound are still demangled, each time.
TEST(CuptiReceiverBoundsTest, KernelNamesPastTheCacheAreStillDemangled) {
  GpuJoin join;
  ReceiverBounds bounds;
  bounds.kernel_names = 1;
  CuptiReceiver receiver(&join, true, bounds);
  Bytes records = Records(Kernel(7, 1, "_Z1av") + Kernel(7, 2, "_Z1bi") + Kernel(7, 3, "_Z1bi"));
  receiver.Feed(records.data(), records.size());
  test::GpuActivities collected;
  TraceStats stats;
  join.Emit(&collected, &stats);
  ASSERT_EQ(collected.activities.size(), 3u);
  EXPECT_EQ(collected.activities[0].name, "a()");
  EXPECT_EQ(collected.activities[1].name, "b(int)");
  EXPECT_EQ(collected.activities[2].name, "b(int)");
  EXPECT_EQ(stats.gpu_queue_full, 0u);
}

}  // namespace
}  // namespace torchprobe
