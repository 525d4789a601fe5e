// What reaches the agent from others (issue 22), piece by piece: target
// text on its way into names and log lines, window names read back (merge,
// the index), the bounded servers of the trigger socket and the metrics
// port, the output folder's rotation against a symlink or a forged index,
// the plan cache checked against its image and its folder, file modes.
// agent_test.cc runs the same cases end to end against a running agent.
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/agent/agent_metrics.h"
#include "userspace/agent/request_server.h"
#include "userspace/agent/target_scan.h"
#include "userspace/agent/target_text.h"
#include "userspace/agent/trigger_socket.h"
#include "userspace/agent/window_child.h"
#include "userspace/agent/window_name.h"
#include "userspace/agent/window_store.h"
#include "userspace/base/atomic_file.h"
#include "userspace/base/clock.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/op_probes.h"
#include "userspace/discover/probe_plan_cache.h"
#include "userspace/export/perfetto_writer.h"
#include "userspace/report/trace_reader.h"

namespace torchprobe {
namespace {

constexpr uid_t kNobody = 65534;

// The asker's own executable, by what its maps say (device and inode), not
// by name: a fork of it is torchprobe, another program is not.
TEST(TargetScanTest, AProcessRunningTorchprobesExecutableIsTorchprobe) {
  StatusOr<std::vector<MapEntry>> own = ReadMaps(static_cast<uint32_t>(getpid()));
  ASSERT_TRUE(own.ok());
  EXPECT_TRUE(IsTorchprobeProcess(*own));
  pid_t fork_of_us = fork();
  if (fork_of_us == 0) {
    pause();
    _exit(0);
  }
  pid_t other = test::Spawn({"/bin/sleep", "30"}, "/dev/null");
  ASSERT_TRUE(test::WaitUntil([&] { return test::ReadFile("/proc/" + std::to_string(other) + "/comm") == "sleep\n"; }, 10));
  StatusOr<std::vector<MapEntry>> forked = ReadMaps(static_cast<uint32_t>(fork_of_us));
  StatusOr<std::vector<MapEntry>> sleeper = ReadMaps(static_cast<uint32_t>(other));
  ASSERT_TRUE(forked.ok() && sleeper.ok());
  EXPECT_TRUE(IsTorchprobeProcess(*forked));
  EXPECT_FALSE(IsTorchprobeProcess(*sleeper));
  for (pid_t pid : {fork_of_us, other}) {
    kill(pid, SIGKILL);
    test::Wait(pid);
  }
}

TEST(TargetTextTest, ALogLineStaysOneLine) {
  std::string line = LogSafe("rank ../../x\nforged\r\x1b[2Jz\x7f\xc3\xa9", 4096);
  EXPECT_EQ(line, "rank ../../x\\x0aforged\\x0d\\x1b[2Jz\\x7f\\xc3\\xa9");
  EXPECT_EQ(LogSafe(std::string(10000, 'a'), 100).size(), 100u);
  EXPECT_TRUE(LogSafe(std::string(10000, 'a'), 100).ends_with("..."));
}

TEST(TargetTextTest, ANamePieceCannotLeaveItsFolder) {
  EXPECT_EQ(NameSafe("../../x\nforged", 32), "______x_forged");
  EXPECT_EQ(NameSafe(std::string("a\0b/c", 5), 32), "a_b_c");
  EXPECT_EQ(NameSafe("host.example-1", 64, "-."), "host.example-1");
  EXPECT_EQ(NameSafe(std::string(100, '7'), 32).size(), 32u);
}

TEST(WindowNameTest, MadeAndReadBackWhateverTheRank) {
  std::string name = MakeWindowName("node-1.example", 4242, "../../x\nforged", 1'700'000'000'123'000'000ull, 7);
  EXPECT_EQ(name.find('/'), std::string::npos) << name;
  EXPECT_EQ(name.find('\n'), std::string::npos) << name;
  EXPECT_EQ(name, "node-1.example-pid4242-rank______x_forged-20231114T221320.123Z-w7.pftrace");
  std::optional<WindowName> parsed = ParseWindowName(name);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->host, "node-1.example");
  EXPECT_EQ(parsed->pid, 4242u);
  EXPECT_EQ(parsed->rank, "______x_forged");
  std::optional<WindowName> plain = ParseWindowName(MakeWindowName("h", 1, "", 0, 0));
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->rank, "");
  // A host named like a rank is still the host.
  plain = ParseWindowName("a-rank5-pid9-20231114T221320.123Z-w0.pftrace");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->host, "a-rank5");
  EXPECT_EQ(plain->rank, "");
  for (const char* other : {"index.jsonl", "../x-pid1-20231114T221320.123Z-w0.pftrace",
                            ".h-pid1-20231114T221320.123Z-w0.pftrace", "victim.pftrace",
                            "h-pid1-20231114T221320.123Z-w0.pftrace.tmp.1234", "h-pid0-20231114T221320.123Z-w0.pftrace",
                            "h-pid1-rank-20231114T221320.123Z-w0.pftrace"})
    EXPECT_FALSE(ParseWindowName(other)) << other;
}

// `merge` takes any file name and any process name, a RANK of 20 digits too
// (std::stoll threw and ended it).
TEST(MergeTest, ARankOfAnyLengthMerges) {
  std::string dir = test::MakeTempDir();
  std::string twenty(20, '9');
  std::string input = dir + "/h-pid7-rank" + twenty + "-20231114T221320.123Z-w0.pftrace";
  std::string error;
  {
    std::unique_ptr<PerfettoWriter> writer = PerfettoWriter::Open(input, &error);
    ASSERT_NE(writer, nullptr) << error;
    writer->Begin(OpTable{OpInfo{"aten::add", "Tensor", ""}}, ClockSnapshot{1000, 1000});
    ProcessInfo process;
    process.pid = 7;
    process.name = "python3 [rank " + twenty + "]";
    writer->AddProcess(process);
    writer->AddThread(ThreadInfo{7, 7, "python3"});
    Slice slice;
    slice.begin_ns = 2000;
    slice.end_ns = 3000;
    writer->AddSliceTree(7, 7, {slice});
    ASSERT_TRUE(writer->Finish(TraceStats{}, &error)) << error;
  }
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "merge", dir + "/m.pftrace", input});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("1 ranks"), std::string::npos) << r.err;
  test::RunCommand({"rm", "-rf", dir});
}

// Windows "from two hosts" whose monotonic clocks differ by 950 s (a trace
// written with another host's clocks) but that ran at the same wall time:
// merged, their slices line up within 1 ms by the traces' wall clocks; a
// trace without one (older) keeps its times, and the summary says so.
TEST(MergeTest, HostsWhoseMonotonicClocksDifferLineUpByTheirWallClocks) {
  constexpr uint64_t kSecond = 1'000'000'000, kWall = 1'700'000'000 * kSecond;
  std::string dir = test::MakeTempDir(), error;
  auto write = [&](const std::string& host, const ClockSnapshot& clock, uint64_t slice_at) {
    std::string path = dir + "/" + host + "-pid7-rank0-20231114T221320.123Z-w0.pftrace";
    std::unique_ptr<PerfettoWriter> writer = PerfettoWriter::Open(path, &error);
    EXPECT_NE(writer, nullptr) << error;
    writer->Begin(OpTable{OpInfo{"aten::add", "Tensor", ""}}, clock);
    writer->AddProcess(ProcessInfo{7, "python3", "python3 train.py", 0});
    writer->AddThread(ThreadInfo{7, 7, "python3"});
    Slice slice;
    slice.begin_ns = slice_at;
    slice.end_ns = slice_at + 1000;
    writer->AddSliceTree(7, 7, {slice});
    EXPECT_TRUE(writer->Finish(TraceStats{}, &error)) << error;
    return path;
  };
  // Host a's snapshot at wall time W, host b's half a second later; both
  // slices at W + 2 s.
  std::string a = write("hosta", ClockSnapshot{1000 * kSecond + 5, 1000 * kSecond, kWall}, 1002 * kSecond);
  std::string b = write("hostb", ClockSnapshot{50 * kSecond + 3, 50 * kSecond, kWall + kSecond / 2},
                        50 * kSecond + 3 * kSecond / 2);
  std::string merged = dir + "/m.pftrace";
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "merge", merged, a, b});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("2 traces lined up by their wall clocks"), std::string::npos) << r.err;
  DecodedTrace trace;
  ASSERT_TRUE(ReadTrace(merged, &trace, &error)) << error;
  std::vector<uint64_t> begins;
  for (const DecodedThread& thread : trace.threads)
    for (const DecodedSlice& slice : thread.slices) begins.push_back(slice.begin_ns);
  ASSERT_EQ(begins.size(), 2u);
  uint64_t apart = begins[0] > begins[1] ? begins[0] - begins[1] : begins[1] - begins[0];
  EXPECT_LT(apart, kSecond / 1000) << begins[0] << " " << begins[1];
  if (!test::TraceProcessor().empty()) {
    EXPECT_EQ(test::QueryTrace(merged, "select name from stats where value > 0 and severity in ('error', 'data_loss')"),
              std::vector<std::vector<std::string>>{});
  }

  std::string old = write("hostc", ClockSnapshot{7 * kSecond, 7 * kSecond, 0}, 8 * kSecond);
  r = test::RunCommand({test::TorchprobeBinary(), "merge", dir + "/m2.pftrace", a, b, old});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("1 without a wall clock (older traces) keep their times"), std::string::npos) << r.err;
  // Clocks no host has (a wall clock past int64 of its monotonic): not lined up, no overflow.
  std::string odd = write("hostd", ClockSnapshot{1, 1, UINT64_MAX}, 2);
  r = test::RunCommand({test::TorchprobeBinary(), "merge", dir + "/m3.pftrace", a, b, odd});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("2 traces lined up by their wall clocks"), std::string::npos) << r.err;
  test::RunCommand({"rm", "-rf", dir});
}

TEST(TriggerRequestTest, OnlyAPidInRangeAndADuration) {
  TriggerRequest request;
  std::string why;
  ASSERT_TRUE(ParseTriggerRequest("window 4242 1.500\n", &request, &why));
  EXPECT_EQ(request.pid, 4242u);
  EXPECT_DOUBLE_EQ(request.duration_s, 1.5);
  for (const char* bad : {"window 0 1\n", "window 4194305 1\n", "window 4294967297 1\n", "window -1 1\n",
                          "window 12 0\n", "window 12 3601\n", "window 12 1 extra\n", "window 12 nan\n",
                          "window  12 1\n", "other 12 1\n"})
    EXPECT_FALSE(ParseTriggerRequest(bad, &request, &why)) << bad;
}

// A unix socket listening in a temporary folder, and clients for it.
class RequestServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::MakeTempDir();
    path_ = dir_ + "/s";
  }
  void TearDown() override {
    for (int fd : clients_) close(fd);
    test::RunCommand({"rm", "-rf", dir_});
  }
  void Listen(RequestServer* server) {
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(fd, 64), 0);
    server->Adopt(fd);
  }
  int Connect() {
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    clients_.push_back(fd);
    return fd;
  }
  // One turn of the agent's loop: poll (10 ms at most), then Service.
  std::vector<Request> Turn(RequestServer* server, uint64_t now_ns, std::vector<pollfd>* polled = nullptr) {
    std::vector<pollfd> fds;
    server->AddPollFds(now_ns, &fds);
    poll(fds.data(), fds.size(), 10);
    std::vector<Request> requests;
    server->Service(fds, now_ns, &requests);
    if (polled) *polled = fds;
    return requests;
  }
  static RequestLimits Lines(size_t max_reading) {
    return RequestLimits{max_reading, 64, 200'000'000,
                         [](std::string_view in) { return in.find('\n') != std::string_view::npos; }};
  }
  static bool Closed(int fd) {  // the server closed it: EOF (or reset) without waiting
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }
  std::string dir_, path_;
  std::vector<int> clients_;
};

// A client that sends a byte now and then is read as its bytes come, never
// waited for, and closed at its request's deadline, counted.
TEST_F(RequestServerTest, ASlowClientIsDroppedAtItsDeadline) {
  RequestServer server(Lines(16));
  Listen(&server);
  int slow = Connect();
  uint64_t start = NowNs();
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(send(slow, "w", 1, MSG_NOSIGNAL), 1);
    EXPECT_TRUE(Turn(&server, start + i * 10'000'000ull).empty());
  }
  EXPECT_EQ(server.reading(), 1u);
  EXPECT_FALSE(Closed(slow));
  EXPECT_EQ(server.NextWakeNs(), start + 200'000'000ull) << "the deadline is the request's, from its accept";
  Turn(&server, start + 200'000'000ull);
  EXPECT_TRUE(Closed(slow));
  EXPECT_EQ(server.dropped(), 1u);
  EXPECT_EQ(server.reading(), 0u);
}

TEST_F(RequestServerTest, ARequestPastItsBudgetIsDropped) {
  RequestServer server(Lines(16));
  Listen(&server);
  int big = Connect();
  std::string bytes(100, 'x');
  ASSERT_EQ(send(big, bytes.data(), bytes.size(), MSG_NOSIGNAL), 100);
  uint64_t now = NowNs();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Turn(&server, now).empty());
  EXPECT_TRUE(Closed(big));
  EXPECT_EQ(server.dropped(), 1u);
}

TEST_F(RequestServerTest, AWholeRequestIsHeldUntilAnswered) {
  RequestServer server(Lines(16));
  Listen(&server);
  int client = Connect();
  ASSERT_EQ(send(client, "window 1 2\n", 11, MSG_NOSIGNAL), 11);
  uint64_t now = NowNs();
  std::vector<Request> requests;
  for (int i = 0; i < 3 && requests.empty(); ++i) requests = Turn(&server, now);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].text, "window 1 2\n");
  EXPECT_EQ(server.held(), 1u);
  Turn(&server, now + 10'000'000'000ull);  // held: no deadline
  EXPECT_EQ(server.held(), 1u);
  server.Answer(requests[0].client, "ok x\n", now);
  char answer[16] = {};
  EXPECT_EQ(recv(client, answer, sizeof answer, 0), 5);
  EXPECT_STREQ(answer, "ok x\n");
  EXPECT_TRUE(Closed(client));
}

// At most max_reading clients are read at once; the listener is left out of
// poll() meanwhile (the rest wait in the kernel's backlog).
TEST_F(RequestServerTest, AtMostMaxReadingAtOnce) {
  RequestServer server(Lines(2));
  Listen(&server);
  for (int i = 0; i < 5; ++i) Connect();
  uint64_t now = NowNs();
  std::vector<pollfd> polled;
  Turn(&server, now);
  Turn(&server, now, &polled);
  EXPECT_EQ(server.reading(), 2u);
  for (const pollfd& fd : polled) EXPECT_NE(fd.fd, server.listen_fd()) << "the listener is polled while full";
}

// Out of file descriptors, accept() fails and the connection stays in the
// backlog: the listener is left out for a second instead of waking poll()
// again at once, and the failure is counted.
TEST_F(RequestServerTest, OutOfFileDescriptorsPausesTheListener) {
  RequestServer server(Lines(16));
  Listen(&server);
  Connect();
  rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  int probe = dup(0);  // the lowest free fd: none above it may be opened
  close(probe);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(probe);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  uint64_t now = NowNs();
  std::vector<pollfd> polled;
  Turn(&server, now);
  Turn(&server, now + 1'000'000, &polled);
  setrlimit(RLIMIT_NOFILE, &old);
  EXPECT_EQ(server.accept_failures(), 1u);
  for (const pollfd& fd : polled) EXPECT_NE(fd.fd, server.listen_fd()) << "polled again while out of fds";
  EXPECT_LE(server.NextWakeNs(), now + 1'000'000'000ull);
  Turn(&server, now + 1'000'000'000ull);  // a second later, with fds again: taken
  EXPECT_EQ(server.reading(), 1u);
}

TEST(MetricsServerTest, AnAddressBeyondLoopbackOnlyWhenAsked) {
  MetricsServer refused;
  std::string error;
  EXPECT_FALSE(refused.Listen("0.0.0.0:0", false, &error));
  EXPECT_NE(error.find("--metrics-any-address"), std::string::npos) << error;
  MetricsServer loopback;
  EXPECT_TRUE(loopback.Listen("127.0.0.2:0", false, &error)) << error;
  MetricsServer any;
  EXPECT_TRUE(any.Listen("0.0.0.0:0", true, &error)) << error;
}

// An index line naming `file`.
std::string IndexLine(const std::string& file) {
  WindowEntry entry;
  entry.file = file;
  entry.bytes = 4;
  return WindowStore::EntryJson(entry) + "\n";
}

// A window file as record leaves it in .partial, and its entry.
WindowEntry PartialWindow(WindowStore* store, uint32_t pid, uint64_t unix_ns) {
  TargetInfo target;
  target.pid = pid;
  WindowEntry entry;
  entry.target = target;
  entry.file = store->NewName("host", target, unix_ns);
  int fd = openat(store->partial_fd(), entry.file.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  EXPECT_EQ(write(fd, "trace", 5), 5);
  close(fd);
  return entry;
}

class WindowStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (files of another owner)";
    dir_ = test::MakeTempDir();
    out_ = dir_ + "/out";
    victims_ = dir_ + "/victims";
    mkdir(out_.c_str(), 0755);
    mkdir(victims_.c_str(), 0755);
    test::WriteFile(victims_ + "/precious", "keep");
  }
  void TearDown() override {
    if (!dir_.empty()) test::RunCommand({"rm", "-rf", dir_});
  }
  std::string dir_, out_, victims_;
};

// .partial a symlink to another folder: emptied at every start, it would
// have emptied that folder.
TEST_F(WindowStoreTest, APartialFolderThatIsASymlinkIsRefused) {
  ASSERT_EQ(symlink(victims_.c_str(), (out_ + "/.partial").c_str()), 0);
  WindowStore store;
  std::string error;
  EXPECT_FALSE(store.Open(out_, 0, 0, &error));
  EXPECT_NE(error.find(".partial"), std::string::npos) << error;
  EXPECT_EQ(test::ReadFile(victims_ + "/precious"), "keep");
}

TEST_F(WindowStoreTest, APartialFolderOfAnotherOwnerIsRefused) {
  mkdir((out_ + "/.partial").c_str(), 0700);
  ASSERT_EQ(chown((out_ + "/.partial").c_str(), kNobody, kNobody), 0);
  test::WriteFile(out_ + "/.partial/theirs", "keep");
  WindowStore store;
  std::string error;
  EXPECT_FALSE(store.Open(out_, 0, 0, &error));
  EXPECT_NE(error.find("uid 65534"), std::string::npos) << error;
  EXPECT_EQ(test::ReadFile(out_ + "/.partial/theirs"), "keep");
}

// Forged index lines name: a file of another user's in DIR, a symlink out of
// DIR, a path out of DIR, a file that is no window. Rotation (one file kept)
// removes only windows of ours.
TEST_F(WindowStoreTest, ForgedIndexLinesNeverRemoveAnotherFile) {
  std::string theirs = "h-pid1-20231114T221320.123Z-w0.pftrace";
  std::string link = "h-pid2-20231114T221320.123Z-w0.pftrace";
  test::WriteFile(out_ + "/" + theirs, "theirs");
  ASSERT_EQ(chown((out_ + "/" + theirs).c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(symlink((victims_ + "/precious").c_str(), (out_ + "/" + link).c_str()), 0);
  test::WriteFile(out_ + "/notes.txt", "keep");
  std::string index;
  for (const std::string& name : {theirs, link, std::string("../victims/precious"), std::string("notes.txt")})
    index += IndexLine(name);
  test::WriteFile(out_ + "/index.jsonl", index);
  WindowStore store;
  std::string error, note;
  ASSERT_TRUE(store.Open(out_, 0, 1, &error, &note)) << error;
  EXPECT_TRUE(store.entries().empty()) << "a forged line was trusted";
  EXPECT_NE(note.find("4 index lines dropped"), std::string::npos) << note;
  for (int i = 0; i < 3; ++i) {
    WindowEntry entry = PartialWindow(&store, 10 + i, 1'700'000'000'000'000'000ull + i);
    ASSERT_TRUE(store.Commit(&entry, &error)) << error;
  }
  EXPECT_EQ(store.entries().size(), 1u);
  EXPECT_EQ(store.files_removed(), 2u);
  EXPECT_EQ(test::ReadFile(out_ + "/" + theirs), "theirs");
  EXPECT_EQ(test::ReadFile(victims_ + "/precious"), "keep");
  EXPECT_EQ(test::ReadFile(out_ + "/notes.txt"), "keep");
  struct stat st;
  EXPECT_EQ(lstat((out_ + "/" + link).c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_TRUE(test::FileExists(out_ + "/" + store.entries()[0].file));
}

// A window's companions (its ET and Kineto JSON): moved in with it, their
// bytes counted with it, removed with it by rotation; one record did not
// write is left out of the entry; one lost after a crash is dropped from
// the index at the next start while its window stays; an index line that
// names another window's file, or a path, as a companion is not trusted
// with it.
TEST_F(WindowStoreTest, CompanionsComeAndGoWithTheirWindow) {
  WindowStore store;
  std::string error;
  ASSERT_TRUE(store.Open(out_, 0, 2, &error)) << error;
  std::vector<WindowEntry> written;
  for (int i = 0; i < 3; ++i) {
    WindowEntry entry = PartialWindow(&store, 20 + i, 1'700'000'000'000'000'000ull + i);
    entry.companions = {CompanionName(entry.file, kEtSuffix), CompanionName(entry.file, kKinetoSuffix)};
    // The first window's record wrote no Kineto JSON.
    for (size_t c = 0; c < (i == 0 ? 1u : 2u); ++c) {
      int fd = openat(store.partial_fd(), entry.companions[c].c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
      EXPECT_EQ(write(fd, "{}", 2), 2);
      close(fd);
    }
    size_t missing = 0;
    ASSERT_TRUE(store.Commit(&entry, &error, &missing)) << error;
    EXPECT_EQ(missing, i == 0 ? 1u : 0u);
    EXPECT_EQ(entry.companions.size(), i == 0 ? 1u : 2u);
    EXPECT_EQ(entry.bytes, 5u + 2u * entry.companions.size());
    written.push_back(entry);
  }
  // --max-files 2: the first window went, with its ET.
  EXPECT_FALSE(test::FileExists(out_ + "/" + written[0].file));
  EXPECT_FALSE(test::FileExists(out_ + "/" + written[0].companions[0]));
  for (int i = 1; i < 3; ++i)
    for (const std::string& name : {written[i].file, written[i].companions[0], written[i].companions[1]})
      EXPECT_TRUE(test::FileExists(out_ + "/" + name)) << name;
  EXPECT_TRUE(test::ListDir(out_ + "/.partial").empty());
  // A crash lost one companion; the index lies about another.
  ASSERT_EQ(unlink((out_ + "/" + written[1].companions[1]).c_str()), 0);
  std::string index = test::ReadFile(out_ + "/index.jsonl");
  size_t at = index.find(written[2].companions[0]);
  ASSERT_NE(at, std::string::npos);
  index.replace(at, written[2].companions[0].size(), "../victims/precious");
  test::WriteFile(out_ + "/index.jsonl", index);
  WindowStore again;
  std::string note;
  ASSERT_TRUE(again.Open(out_, 0, 2, &error, &note)) << error;
  ASSERT_EQ(again.entries().size(), 2u);
  EXPECT_EQ(again.entries()[0].companions, std::vector<std::string>{written[1].companions[0]});
  EXPECT_EQ(again.entries()[0].bytes, 7u);
  EXPECT_EQ(again.entries()[1].companions, std::vector<std::string>{written[2].companions[1]});
  EXPECT_EQ(test::ReadFile(victims_ + "/precious"), "keep");
  EXPECT_EQ(test::ReadFile(out_ + "/index.jsonl").find("precious"), std::string::npos);
}

// An index another user wrote (or a symlink named index.jsonl) is not read:
// its lines could name root's own window files for removal.
TEST_F(WindowStoreTest, AnIndexNotOursIsNotRead) {
  std::string ours = "h-pid1-20231114T221320.123Z-w0.pftrace";
  test::WriteFile(out_ + "/" + ours, "ours");
  test::WriteFile(out_ + "/index.jsonl", IndexLine(ours));
  ASSERT_EQ(chown((out_ + "/index.jsonl").c_str(), kNobody, kNobody), 0);
  WindowStore store;
  std::string error, note;
  ASSERT_TRUE(store.Open(out_, 0, 1, &error, &note)) << error;
  EXPECT_TRUE(store.entries().empty());
  EXPECT_NE(note.find("not a regular file of this agent's"), std::string::npos) << note;
  WindowEntry entry = PartialWindow(&store, 5, 1'700'000'000'000'000'000ull);
  ASSERT_TRUE(store.Commit(&entry, &error)) << error;
  EXPECT_TRUE(test::FileExists(out_ + "/" + ours));
  struct stat st;
  ASSERT_EQ(stat((out_ + "/index.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "replaced by ours";
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// A copy of the fake libtorch, planned into a cache folder of its own.
class PlanCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string fixture = test::FixturePath("libtorch_cpu.so");
    if (!test::FileExists(fixture)) GTEST_SKIP() << fixture << " not built";
    dir_ = test::MakeTempDir();
    bytes_ = test::ReadFile(fixture);
    setenv(kPlanCacheEnv, (dir_ + "/plans").c_str(), 1);
  }
  void TearDown() override {
    unsetenv(kPlanCacheEnv);
    if (!dir_.empty()) test::RunCommand({"rm", "-rf", dir_});
  }
  std::string Image(const std::string& name, const std::string& bytes) {
    std::string path = dir_ + "/" + name;
    test::WriteFile(path, bytes);
    return path;
  }
  // FindOpProbes with the cache off: what the image itself plans to.
  static std::vector<uint64_t> Uncached(const std::string& path) {
    const char* on = std::getenv(kPlanCacheEnv);
    std::string saved = on ? on : "";
    unsetenv(kPlanCacheEnv);
    StatusOr<OpProbeSet> set = FindOpProbes(path);
    setenv(kPlanCacheEnv, saved.c_str(), 1);
    std::vector<uint64_t> offsets;
    if (set.ok())
      for (const OpProbe& p : set->probes) offsets.push_back(p.file_offset);
    return offsets;
  }
  static std::vector<uint64_t> Offsets(const OpProbeSet& set) {
    std::vector<uint64_t> offsets;
    for (const OpProbe& p : set.probes) offsets.push_back(p.file_offset);
    return offsets;
  }
  // The offset of `needle` in the image; npos when absent.
  size_t Find(const std::string& needle) const { return bytes_.find(needle); }
  std::string dir_, bytes_;
};

// An entry under an image's key that another image's plan fills (another
// file at a reused inode, a file rewritten with its mtime set back) is not
// used: the bytes at its probe sites differ. It is replaced by a new plan.
TEST_F(PlanCacheTest, AnEntryWhoseProbeSitesDifferIsReplanned) {
  mkdir((dir_ + "/a").c_str(), 0700);
  std::string a = Image("a/libtorch_cpu.so", bytes_);
  StatusOr<OpProbeSet> planned = FindOpProbes(a);
  ASSERT_TRUE(planned.ok()) << planned.status().message();
  ASSERT_FALSE(planned->probes.empty());
  std::string entry_a = PlanCachePath(a);
  ASSERT_TRUE(test::FileExists(entry_a));
  // B: the same file with its first probe site's bytes changed.
  std::string changed = bytes_;
  changed[planned->probes[0].file_offset] ^= 0x5a;
  mkdir((dir_ + "/b").c_str(), 0700);
  std::string b = Image("b/libtorch_cpu.so", changed);
  std::string entry_b = PlanCachePath(b);
  test::WriteFile(entry_b, test::ReadFile(entry_a));  // A's plan under B's key
  StatusOr<std::unique_ptr<ElfImage>> image_b = ElfImage::Open(b);
  ASSERT_TRUE(image_b.ok());
  OpProbeSet loaded;
  EXPECT_EQ(LoadProbePlan(entry_b, **image_b, &loaded), CachedPlan::kMismatch);
  StatusOr<OpProbeSet> found = FindOpProbes(b);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(Offsets(*found), Uncached(b));
  EXPECT_EQ(LoadProbePlan(entry_b, **image_b, &loaded), CachedPlan::kLoaded) << "the entry was not replaced";
}

TEST_F(PlanCacheTest, AnEntryOfAnotherBuildIdIsReplanned) {
  mkdir((dir_ + "/a").c_str(), 0700);
  std::string a = Image("a/libtorch_cpu.so", bytes_);
  StatusOr<std::unique_ptr<ElfImage>> image_a = ElfImage::Open(a);
  ASSERT_TRUE(image_a.ok());
  std::string build_id((*image_a)->BuildId());
  ASSERT_FALSE(build_id.empty()) << "the fixture has no build-id";
  StatusOr<OpProbeSet> planned = FindOpProbes(a);
  ASSERT_TRUE(planned.ok());
  std::string changed = bytes_;
  size_t at = Find(build_id);
  ASSERT_NE(at, std::string::npos);
  changed[at] ^= 1;
  mkdir((dir_ + "/b").c_str(), 0700);
  std::string b = Image("b/libtorch_cpu.so", changed);
  test::WriteFile(PlanCachePath(b), test::ReadFile(PlanCachePath(a)));
  StatusOr<std::unique_ptr<ElfImage>> image_b = ElfImage::Open(b);
  ASSERT_TRUE(image_b.ok());
  OpProbeSet loaded;
  EXPECT_EQ(LoadProbePlan(PlanCachePath(b), **image_b, &loaded), CachedPlan::kMismatch);
}

// A cache folder another user can write is not used, and the agent says so
// at start (one line) instead of starting.
TEST_F(PlanCacheTest, AFolderOthersCanWriteIsRefused) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (a folder of another owner)";
  std::string plans = dir_ + "/plans";
  mkdir(plans.c_str(), 0777);
  chmod(plans.c_str(), 0777);
  std::string a = Image("libtorch_cpu.so", bytes_);
  EXPECT_EQ(PlanCachePath(a), "");
  std::string error;
  EXPECT_FALSE(PreparePlanCacheDir(plans, &error));
  EXPECT_NE(error.find("mode 0777"), std::string::npos) << error;
  chmod(plans.c_str(), 0700);
  ASSERT_EQ(chown(plans.c_str(), kNobody, kNobody), 0);
  EXPECT_FALSE(PreparePlanCacheDir(plans, &error));
  EXPECT_NE(error.find("uid 65534"), std::string::npos) << error;
  test::CommandResult r = test::RunCommand({test::TorchprobeBinary(), "agent", "-o", dir_ + "/out", "--socket",
                                            dir_ + "/s", "--plan-cache", plans});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("plan cache " + plans + " refused"), std::string::npos) << r.err;
  ASSERT_EQ(chown(plans.c_str(), 0, 0), 0);
  EXPECT_TRUE(PreparePlanCacheDir(plans, &error)) << error;
}

// The agent's --plan-cache reaches its windows even when the agent's own
// environment names another folder.
TEST(WindowChildTest, ThePlanCacheOfTheCommandLineWins) {
  const char* environment[] = {"PATH=/bin", "TORCHPROBE_PLAN_CACHE=/from/env", "HOME=/root", nullptr};
  std::vector<std::string> env = WindowEnvironment(environment, "/from/flag");
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/bin", "HOME=/root", "TORCHPROBE_PLAN_CACHE=/from/flag"}));
  env = WindowEnvironment(environment, "");
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/bin", "HOME=/root"}));
}

TEST(WindowChildTest, TheLogIsReadAsBytes) {
  std::string dir = test::MakeTempDir();
  // A number no double holds (std::stod threw on it).
  test::WriteFile(dir + "/log",
                  "torchprobe: traced 1 x, detach " + std::string(400, '9') + " ms\n"
                  "torchprobe: plan cache entry rejected: a does not match b\n"
                  "torchprobe: wrote t: 1 op events, attach 1.0 ms, detach 12.5 ms; probe cost\n\n");
  WindowLog log = ReadWindowLog(dir + "/log");
  EXPECT_EQ(log.detach_ns, 12'500'000u);
  EXPECT_EQ(log.plan_cache_rejected, 1u);
  EXPECT_EQ(log.last_line, "torchprobe: wrote t: 1 op events, attach 1.0 ms, detach 12.5 ms; probe cost");
  test::RunCommand({"rm", "-rf", dir});
}

TEST(FileModeTest, OutputsAre0600UnlessAsked) {
  std::string dir = test::MakeTempDir();
  std::string error;
  auto write = [&](const std::string& name) {
    std::unique_ptr<AtomicFile> file = AtomicFile::Open(dir + "/" + name, &error);
    EXPECT_NE(file, nullptr) << error;
    file->Write("x", 1);
    EXPECT_TRUE(file->Commit(&error)) << error;
    struct stat st;
    stat((dir + "/" + name).c_str(), &st);
    return st.st_mode & 07777;
  };
  mode_t old_umask = umask(0);  // the mode is ours whatever the umask
  EXPECT_EQ(write("a"), 0600u);
  SetOutputFileMode(0640);
  EXPECT_EQ(write("b"), 0640u);
  SetOutputFileMode(kDefaultOutputMode);
  umask(old_umask);
  mode_t mode = 0;
  EXPECT_TRUE(ParseFileMode("0644", &mode));
  EXPECT_EQ(mode, 0644u);
  for (const char* bad : {"", "644x", "0755", "0400", "4600", "01600", "9"})
    EXPECT_FALSE(ParseFileMode(bad, &mode)) << bad;
  test::RunCommand({"rm", "-rf", dir});
}

}  // namespace
}  // namespace torchprobe
