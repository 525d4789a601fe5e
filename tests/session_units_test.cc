// The record session's parts as units, on real BPF and real processes: the
// target tracker (named processes, their libtorch, exits) and the capture
// windows (a window closed and written, the next one wired fresh).
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/fakes.h"
#include "tests/test_support.h"
#include "userspace/attach/probe_keeper.h"
#include "userspace/attach/uprobe_multi.h"
#include "userspace/base/clock.h"
#include "userspace/base/proc_maps.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/session/capture_windows.h"
#include "userspace/session/record_signals.h"
#include "userspace/session/target_tracker.h"

namespace torchprobe {
namespace {

// What the session's parts tell a probe set, in order.
class LoggingSet : public ProbeSet {
 public:
  Status Attach(const TracedProcess& process) override {
    log.push_back("attach " + std::to_string(process.pid));
    return Status::Ok();
  }
  void Release(uint32_t pid) override { log.push_back("release " + std::to_string(pid)); }
  void Follow(uint32_t pid, uint64_t since_ns) override { log.push_back("follow " + std::to_string(pid)); }
  void Exited(uint32_t pid) override { log.push_back("exited " + std::to_string(pid)); }
  void Wire(const ModelWiring& wiring) override {
    ++wires;
    model = wiring.model;
  }
  bool Saw(const std::string& line) const { return std::find(log.begin(), log.end(), line) != log.end(); }

  std::vector<std::string> log;
  int wires = 0;
  OpStackModel* model = nullptr;
};

// A tracker over the ops set and a LoggingSet, with a real BPF object and keeper.
class TrackerHarness {
 public:
  explicit TrackerHarness(TargetTracker::Options options) {
    auto ops = std::make_unique<OpsProbeSet>(OpsOptions{"auto", false, false, true, nullptr}, &table_);
    ops_ = ops.get();
    sets_.push_back(std::move(ops));
    auto logging = std::make_unique<LoggingSet>();
    logging_ = logging.get();
    sets_.push_back(std::move(logging));
    model_ = std::make_unique<OpStackModel>(&sink_, &names_);
    ModelWiring wiring{model_.get(), &sink_, nullptr, nullptr, nullptr, &table_, &names_, [] {}};
    for (auto& set : sets_) set->Wire(wiring);
    tracker_ = std::make_unique<TargetTracker>(
        options, ops_, &sets_, &names_, [this]() -> TraceStats& { return model_->stats(); }, [this] { ++traced_; });
  }
  ~TrackerHarness() {
    if (keeper_) {
      keeper_->ReleaseAll();
      for (auto& set : sets_) set->AfterRemoval();
      tracker_->Clear();
      // The sets' links go back to the keeper before it finishes (a set
      // that still holds a process asks it to release them as it goes).
      tracker_.reset();
      sets_.clear();
      keeper_->Finish(true);
    }
  }
  // Loads BPF and gives every part its context, as the session does.
  void Load() {
    StatusOr<std::unique_ptr<ProbeKeeper>> keeper = ProbeKeeper::Start();
    ASSERT_TRUE(keeper.ok()) << keeper.status().message();
    keeper_ = std::move(*keeper);
    BpfConfig config;
    config.use_uprobe_multi = HaveUprobeMulti();
    config.follow_forks = true;
    config.watch_loads = true;
    StatusOr<std::unique_ptr<BpfPrograms>> bpf = ops_->Load(config);
    ASSERT_TRUE(bpf.ok()) << bpf.status().message();
    bpf_ = std::move(*bpf);
    keeper_->SetMaps(bpf_->ctl_fd(), bpf_->held_fd(), bpf_->gated_hits_fd());
    ProbeSetContext context{bpf_.get(), keeper_.get(), config.use_uprobe_multi};
    for (auto& set : sets_) set->SetContext(context);
    tracker_->SetContext(context);
  }

  TargetTracker& tracker() { return *tracker_; }
  ProbeKeeper& keeper() { return *keeper_; }
  const LoggingSet& logged() const { return *logging_; }
  const TraceStats& stats() const { return model_->stats(); }
  int traced() const { return traced_; }

 private:
  OpTable table_;
  test::RecordingSink sink_;
  ProcNames names_;
  std::unique_ptr<OpStackModel> model_;
  ProbeSets sets_;
  OpsProbeSet* ops_ = nullptr;
  LoggingSet* logging_ = nullptr;
  std::unique_ptr<ProbeKeeper> keeper_;
  std::unique_ptr<BpfPrograms> bpf_;
  std::unique_ptr<TargetTracker> tracker_;
  int traced_ = 0;
};

// A process that runs the fake libtorch's ops until killed.
pid_t SpinOps() { return test::Spawn({test::FixturePath("few/op_spin"), "60"}, "/dev/null"); }

void Reap(pid_t pid) {
  kill(pid, SIGKILL);
  test::Wait(pid);
}

TEST(TargetTrackerTest, ANamedProcessIsTracedOnceItsLibtorchOpsAreLiveThenEverySetAttachesBesideThem) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF, uprobes)";
  pid_t pid = SpinOps();
  ASSERT_TRUE(test::WaitUntil([&] { return FindMappedImage(pid, kTorchLibrary).ok(); }, 10));
  TrackerHarness h({/*launch=*/false, /*wait=*/false, /*follow_children=*/true, /*quiet=*/true});
  uint32_t target = static_cast<uint32_t>(pid);
  ASSERT_TRUE(h.tracker().Plan({target}).ok());
  h.Load();
  Status attached = h.tracker().AttachNamed({target});
  ASSERT_TRUE(attached.ok()) << attached.message();
  EXPECT_EQ(h.traced(), 1);
  EXPECT_GT(h.stats().probed_symbols, 0u);
  std::string id = std::to_string(target);
  EXPECT_TRUE(h.logged().Saw("follow " + id));
  EXPECT_TRUE(h.logged().Saw("attach " + id));
  EXPECT_TRUE(h.tracker().Alive());

  Reap(pid);
  h.tracker().Exited(target);
  EXPECT_TRUE(h.logged().Saw("release " + id));
  EXPECT_TRUE(h.logged().Saw("exited " + id));
  EXPECT_FALSE(h.tracker().Alive());
}

// The byte at `address` in `pid`; -1 when it cannot be read.
int CodeByte(pid_t pid, uint64_t address) {
  uint8_t byte = 0;
  iovec local{&byte, 1}, remote{reinterpret_cast<void*>(address), 1};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == 1 ? byte : -1;
}

// A removal's cost to the target ends when the kernel has taken the
// breakpoints out of its code, before the links' closes return (they wait
// for grace periods). The keeper tells that moment by the byte at each hot
// link's witness address: int3 while the probe is in, the instruction once
// it is out.
TEST(ProbeRemovalTest, BreakpointsLeaveTheCodeNoLaterThanTheLinksAreReleased) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF, uprobes)";
  pid_t pid = SpinOps();
  ASSERT_TRUE(test::WaitUntil([&] { return FindMappedImage(pid, kTorchLibrary).ok(); }, 10));
  StatusOr<MappedImage> image = FindMappedImage(pid, kTorchLibrary);
  ASSERT_TRUE(image.ok()) << image.status().message();
  StatusOr<uint64_t> offset = FindFunctionOffset(image->host_path, "_ZN2at4_ops5op0004callEl");
  ASSERT_TRUE(offset.ok()) << offset.status().message();
  uint64_t address = MappedCodeAddresses(pid, image->host_path, {*offset})[0];
  ASSERT_NE(address, 0u);
  int original = CodeByte(pid, address);
  ASSERT_NE(original, 0xcc);
  {
    TrackerHarness h({/*launch=*/false, /*wait=*/false, /*follow_children=*/true, /*quiet=*/true});
    uint32_t target = static_cast<uint32_t>(pid);
    ASSERT_TRUE(h.tracker().Plan({target}).ok());
    h.Load();
    ASSERT_TRUE(h.tracker().AttachNamed({target}).ok());
    EXPECT_EQ(CodeByte(pid, address), 0xcc) << "the op's entry holds the probe's breakpoint";
    EXPECT_EQ(h.keeper().HotInCode(), 0u) << "nothing asked to go yet";
    h.keeper().ReleaseAll();
    uint64_t out_at = 0, released_at = 0;
    ASSERT_TRUE(test::WaitUntil(
        [&] {
          uint64_t now = NowNs();
          if (!out_at && h.keeper().HotInCode() == 0) out_at = now;
          if (!released_at && h.keeper().progress().pending_hot == 0) released_at = now;
          return out_at && released_at;
        },
        30));
    EXPECT_LE(out_at, released_at);
    EXPECT_EQ(CodeByte(pid, address), original) << "out of the code";
  }
  Reap(pid);
}

TEST(TargetTrackerTest, APidWithoutLibtorchIsOneLineUnlessItIsWaitedFor) {
  if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF, uprobes)";
  pid_t pid = test::Spawn({"/bin/sleep", "60"}, "/dev/null");
  uint32_t target = static_cast<uint32_t>(pid);
  {
    TrackerHarness h({false, /*wait=*/false, true, true});
    Status planned = h.tracker().Plan({target});
    ASSERT_FALSE(planned.ok());
    EXPECT_NE(planned.message().find(kTorchLibrary), std::string::npos) << planned.message();
  }
  {
    TrackerHarness h({false, /*wait=*/true, true, true});
    ASSERT_TRUE(h.tracker().Plan({target}).ok());
    h.Load();
    ASSERT_TRUE(h.tracker().AttachNamed({target}).ok());
    EXPECT_EQ(h.traced(), 0);  // watched at its loader until it maps libtorch
    EXPECT_TRUE(h.logged().Saw("follow " + std::to_string(target)));
    EXPECT_FALSE(h.logged().Saw("attach " + std::to_string(target)));
  }
  Reap(pid);
}

// Capture windows on their own: a test's BPF object opens and shuts the gate.
class CaptureWindowsTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    dir_ = test::MakeTempDir();
    options_.output = dir_ + "/out.pftrace";
    options_.quiet = true;
    auto logging = std::make_unique<LoggingSet>();
    logging_ = logging.get();
    sets_.push_back(std::move(logging));
    StatusOr<std::unique_ptr<BpfPrograms>> bpf = BpfPrograms::Load(BpfConfig());
    ASSERT_TRUE(bpf.ok()) << bpf.status().message();
    bpf_ = std::move(*bpf);
  }
  void TearDown() override {
    if (!dir_.empty()) test::RemoveTempDir(dir_);
  }
  std::unique_ptr<CaptureWindows> Make() {
    auto windows = std::make_unique<CaptureWindows>(options_, &ops_, &names_, &sets_,
                                                    [this](TraceStats& stats) { ++fills_; });
    windows->SetControls(bpf_.get(), [this] { ++gate_closes_; }, &status_line_);
    return windows;
  }

  RecordOptions options_;
  std::string dir_;
  OpTable ops_;
  ProcNames names_;
  ProbeSets sets_;
  LoggingSet* logging_ = nullptr;
  std::unique_ptr<BpfPrograms> bpf_;
  StatusLine status_line_{true};
  int fills_ = 0;
  int gate_closes_ = 0;
};

TEST_F(CaptureWindowsTest, AClosedWindowIsWrittenAndTheNextOneGetsAFreshModel) {
  options_.windows.window_s = 1;
  options_.windows.every_s = 10;
  std::unique_ptr<CaptureWindows> windows = Make();
  ASSERT_TRUE(windows->Open().ok());
  EXPECT_TRUE(windows->open());
  EXPECT_EQ(logging_->wires, 1);
  OpStackModel* first = logging_->model;
  windows->Begin();
  windows->Begin();  // once
  EXPECT_TRUE(windows->begun());

  int toggles = ToggleSignals();
  uint64_t now = NowNs();
  WindowSchedule past_first(options_.windows, now - 2'000'000'000);  // 2 s in: between windows
  ASSERT_TRUE(windows->Follow(past_first, &toggles).ok());
  EXPECT_FALSE(windows->open());
  EXPECT_EQ(gate_closes_, 1);
  EXPECT_EQ(fills_, 1);
  EXPECT_EQ(windows->closed(), 1);
  EXPECT_GT(test::ReadFile(dir_ + "/out.0.pftrace").size(), 0u);
  EXPECT_EQ(logging_->wires, 2);  // the next window's model, wired before it opens
  EXPECT_NE(logging_->model, first);

  WindowSchedule second(options_.windows, now - 10'200'000'000);  // 0.2 s into the second window
  ASSERT_TRUE(windows->Follow(second, &toggles).ok());
  EXPECT_TRUE(windows->open());
  TraceStats stats;
  std::string error;
  ASSERT_TRUE(windows->Finish(stats, &error)) << error;
  EXPECT_GT(test::ReadFile(dir_ + "/out.1.pftrace").size(), 0u);
}

TEST_F(CaptureWindowsTest, StartAfterOpensClosedAndWritesNothingWhenStoppedBeforeTheFirstWindow) {
  options_.windows.start_after_s = 5;
  std::unique_ptr<CaptureWindows> windows = Make();
  ASSERT_TRUE(windows->Open().ok());
  EXPECT_FALSE(windows->open());
  TraceStats stats;
  std::string error;
  EXPECT_TRUE(windows->Finish(stats, &error));
  EXPECT_EQ(gate_closes_, 0);
  windows.reset();
  EXPECT_FALSE(test::FileExists(options_.output));
}

}  // namespace
}  // namespace torchprobe
