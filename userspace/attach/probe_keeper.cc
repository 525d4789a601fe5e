// The keeper process; see the header for why it exists.
//
// torchprobe and the keeper share two things: the file descriptor table
// (CLONE_FILES) and one MAP_SHARED region, KeeperShared, through which
// torchprobe registers links and asks for them to be closed. The keeper is
// a copy of torchprobe made by a raw clone: it must not use pthreads or
// raise() (glibc's cached thread id is torchprobe's), and it must never
// close or write to an fd that is not a link it was given (the table is
// torchprobe's too).
#include "userspace/attach/probe_keeper.h"
#include "userspace/clock.h"

#include <bpf/bpf.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "bpf/events.h"
#include "userspace/attach/return_fixer.h"
#include "userspace/attach/uprobe_multi.h"
#include "userspace/discover/proc_maps.h"

namespace torchprobe {

namespace {

enum SlotState : uint32_t { kLive = 1, kRequested = 2, kClosed = 3 };

struct Slot {
  int32_t fd;
  uint32_t group;
  uint32_t op_id;
  int32_t pid;  // the process the link probes (> 0), or every process (-1)
  std::atomic<uint32_t> state;
};

// A process whose returns the keeper guards (return_fixer.h).
enum GuardState : uint32_t { kGuardAsked = 1, kGuarded = 2, kGuardFailed = 3, kReleaseAsked = 4,
                             kReleased = 5 };

struct Guard {
  int32_t pid;
  std::atomic<uint32_t> state;
  char error[160];  // kGuardFailed: why
};

constexpr uint32_t kMaxSlots = 1u << 20;  // links of one run (per-symbol: ~12k per process)
constexpr uint32_t kMaxGuards = TP_MAX_PIDS;
constexpr uint64_t kResortNs = 1'000'000'000;
constexpr size_t kCloseBatch = 16;
constexpr size_t kCloserStack = 16 << 10;

// A closer: a thread-like clone (same memory, same fd table) that makes one
// last close and exits. It runs nothing of glibc but the syscall wrapper
// (its TLS is the keeper's: no errno is read).
int CloserMain(void* fd) {
  syscall(SYS_close, static_cast<int>(reinterpret_cast<intptr_t>(fd)));
  syscall(SYS_exit, 0);
  return 0;
}

}  // namespace

// Lives in MAP_SHARED memory: lock-free atomics only.
struct KeeperShared {
  std::atomic<uint32_t> slot_count;     // slots [0, count) are written
  std::atomic<uint32_t> finished;       // torchprobe is done with the keeper
  std::atomic<uint32_t> maps_set;
  int32_t ctl_fd, held_fd, gated_hits_fd;
  std::atomic<uint64_t> requests;       // bumped by each Release
  std::atomic<uint64_t> sorted_requests;  // the keeper has ordered up to this request
  std::atomic<uint64_t> pending;        // requested, not closed
  std::atomic<uint64_t> pending_hot;    // ... hot, as of the last ordering
  std::atomic<uint64_t> closed;
  std::atomic<uint32_t> unused_now;     // remove unused probes now too (SIGUSR1)
  std::atomic<uint64_t> closable;       // requested and closable now, as of the last ordering
  std::atomic<uint32_t> fixing_set;    // the two fds below are valid
  int32_t fixes_fd, list_prog_fd;
  std::atomic<uint32_t> guard_count;
  std::atomic<uint32_t> guard_probe_set;  // guard_path/offsets are written
  char guard_path[4096];
  uint32_t guard_offset_count;
  uint64_t guard_offsets[8];
  int32_t throw_prog_fd;
  std::atomic<uint64_t> throws_fixed;
  std::atomic<uint64_t> guarded;         // processes traced now
  Guard guards[kMaxGuards];
  std::atomic<uint64_t> calls[TP_MAX_OPS];
  Slot slots[kMaxSlots];
};

namespace {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared across processes");

class Keeper {
 public:
  Keeper(KeeperShared* s, int wake_fd, pid_t owner) : s_(s), wake_fd_(wake_fd), owner_(owner) {}
  [[noreturn]] void Run();

 private:
  void OnOwnerDeath();
  void Order();
  void CloseNext();
  // The shared counters after a requested link was closed.
  void CountClosed(bool hot);
  // Closes the next batchable links of the queue at once, up to kCloseBatch:
  // each removal waits for grace periods, which concurrent removals share (5
  // uprobe_multi links: 224 ms one by one, 88 ms together, measured here).
  // Batchable: hot links (the target waits on them), and every link of a
  // process that exited (no one to slow; one at a time, the ~3000
  // per-symbol probes of --attach uprobe took over 25 minutes, and held up
  // every other uprobe removal on the host meanwhile).
  void CloseBatch();
  // Calls seen by torchprobe plus hits since the gate closed.
  uint64_t Heat(uint32_t op_id) const;
  void MapGatedHits();
  // Guard requests: trace the processes asked for, release the ones whose
  // return probes are all gone.
  void ServeGuards();
  // Return probe links of the run still open (asked to close or not).
  bool HasOpenLinks() const;
  // A forked child of a guarded process gets its own unwinder probe, owned
  // and closed by the keeper like torchprobe's links.
  void GuardForkedChild(pid_t child);

  KeeperShared* s_;
  ReturnFixer fixer_;
  bool guards_waiting_ = false;  // a release is wanted: look again soon
  int wake_fd_;
  pid_t owner_;
  bool owner_dead_ = false;
  // Whether a requested, never-hit link may be closed now: see the header.
  bool MayCloseUnused(const Slot& slot, std::unordered_map<int32_t, bool>* gone);

  std::vector<uint32_t> queue_;  // requested slots to close now, hottest first
  std::vector<bool> hot_;        // parallel to queue_
  std::vector<bool> batchable_;  // ... closed in parallel (CloseBatch)
  const volatile uint32_t* gated_hits_ = nullptr;  // the BPF map, mapped
  size_t next_ = 0;
};

void Keeper::MapGatedHits() {
  // Mapped once, while torchprobe surely holds the fd: the mapping outlives
  // the fd, which torchprobe closes as it exits.
  if (gated_hits_ || !s_->maps_set.load()) return;
  void* map = mmap(nullptr, TP_MAX_OPS * sizeof(uint32_t), PROT_READ, MAP_SHARED,
                   s_->gated_hits_fd, 0);
  if (map != MAP_FAILED) gated_hits_ = static_cast<const volatile uint32_t*>(map);
}

uint64_t Keeper::Heat(uint32_t op_id) const {
  if (op_id == ProbeKeeper::kAlwaysHot || op_id == ProbeKeeper::kReturnGuard) return UINT64_MAX;
  if (op_id >= TP_MAX_OPS) return 0;
  uint64_t heat = s_->calls[op_id].load(std::memory_order_relaxed);
  return gated_hits_ ? heat + gated_hits_[op_id] : heat;
}

bool Keeper::MayCloseUnused(const Slot& slot, std::unordered_map<int32_t, bool>* gone) {
  if (s_->unused_now.load() || slot.pid <= 0) return true;
  auto [it, inserted] = gone->try_emplace(slot.pid, false);
  // Once per process and ordering: there are thousands of slots. Exited
  // (a zombie too): nothing to unpatch, nothing to harm.
  if (inserted) it->second = !IsProcessAlive(static_cast<uint32_t>(slot.pid));
  return it->second;
}

void Keeper::Order() {
  uint64_t requests = s_->requests.load();
  std::unordered_map<int32_t, bool> gone;
  std::vector<std::pair<uint64_t, uint32_t>> order;  // (heat, slot)
  uint32_t count = s_->slot_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < count; ++i) {
    const Slot& slot = s_->slots[i];
    if (slot.state.load() != kRequested) continue;
    if (slot.op_id == ProbeKeeper::kReturnGuard && fixer_.Tracing(slot.pid)) continue;
    uint64_t heat = Heat(slot.op_id);
    if (heat > 0 || MayCloseUnused(slot, &gone)) order.emplace_back(heat, i);
  }
  auto exited = [&gone](int32_t pid) {
    auto it = gone.find(pid);
    return it != gone.end() && it->second;
  };
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  queue_.clear();
  hot_.clear();
  batchable_.clear();
  uint64_t hot = 0;
  for (const auto& [heat, slot] : order) {
    // A guard link is closable only once its process was let go: nothing
    // of torchprobe is left there to wait for.
    bool is_hot = heat > 0 && s_->slots[slot].op_id != ProbeKeeper::kReturnGuard;
    queue_.push_back(slot);
    hot_.push_back(is_hot);
    batchable_.push_back(is_hot || exited(s_->slots[slot].pid));
    hot += is_hot;
  }
  s_->closable.store(queue_.size());
  next_ = 0;
  s_->pending_hot.store(hot);
  s_->sorted_requests.store(requests);
}

void Keeper::CloseNext() {
  Slot& slot = s_->slots[queue_[next_]];
  bool hot = hot_[next_];
  ++next_;
  uint32_t expected = kRequested;
  if (!slot.state.compare_exchange_strong(expected, kClosed)) return;
  close(slot.fd);
  CountClosed(hot);
}

void Keeper::CountClosed(bool hot) {
  s_->pending.fetch_sub(1);
  if (hot) s_->pending_hot.fetch_sub(1);
  s_->closable.fetch_sub(1);
  s_->closed.fetch_add(1);
}

void Keeper::CloseBatch() {
  static char stacks[kCloseBatch][kCloserStack] __attribute__((aligned(16)));
  std::vector<Slot*> batch;
  std::vector<bool> batch_hot;
  while (next_ < queue_.size() && batchable_[next_] && batch.size() < kCloseBatch) {
    Slot& slot = s_->slots[queue_[next_]];
    bool hot = hot_[next_];
    ++next_;
    uint32_t expected = kRequested;
    if (slot.state.compare_exchange_strong(expected, kClosed)) {
      batch.push_back(&slot);
      batch_hot.push_back(hot);
    }
  }
  std::vector<pid_t> closers;
  for (size_t i = 0; i < batch.size(); ++i) {
    int pid = clone(CloserMain, stacks[i] + kCloserStack, CLONE_VM | CLONE_FILES | CLONE_UNTRACED,
                    reinterpret_cast<void*>(static_cast<intptr_t>(batch[i]->fd)));
    if (pid > 0) closers.push_back(pid);
    else close(batch[i]->fd);  // no clone: one at a time, here
  }
  for (pid_t pid : closers) {
    // No exit signal: __WALL. ECHILD when the fixer's wait took it first.
    while (waitpid(pid, nullptr, __WALL) < 0 && errno == EINTR) {
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) CountClosed(batch_hot[i]);
}

void Keeper::OnOwnerDeath() {
  owner_dead_ = true;
  if (s_->maps_set.load()) {
    // No more events, no more stops; then let go of whoever is stopped.
    uint32_t key = 0;
    tp_ctl ctl = {GATE_CLOSED, LOADS_IGNORE};
    bpf_map_update_elem(s_->ctl_fd, &key, &ctl, BPF_ANY);
    uint32_t pid = 0, next_pid = 0;
    std::vector<uint32_t> held;
    bool first = true;
    while (bpf_map_get_next_key(s_->held_fd, first ? nullptr : &pid, &next_pid) == 0) {
      held.push_back(next_pid);
      pid = next_pid;
      first = false;
    }
    for (uint32_t p : held) {
      kill(static_cast<pid_t>(p), SIGCONT);
      bpf_map_delete_elem(s_->held_fd, &p);
    }
  }
  uint32_t count = s_->slot_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t expected = kLive;
    if (s_->slots[i].state.compare_exchange_strong(expected, kRequested)) s_->pending.fetch_add(1);
  }
  s_->requests.fetch_add(1);
}

bool Keeper::HasOpenLinks() const {
  uint32_t count = s_->slot_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < count; ++i) {
    const Slot& slot = s_->slots[i];
    uint32_t state = slot.state.load();
    if (slot.op_id != ProbeKeeper::kReturnGuard &&
        (state == kLive || state == kRequested))
      return true;
  }
  return false;
}

void Keeper::GuardForkedChild(pid_t child) {
  if (s_->guard_probe_set.load() != 1) return;
  std::vector<uint64_t> offsets(s_->guard_offsets, s_->guard_offsets + s_->guard_offset_count);
  std::vector<uint64_t> cookies(offsets.size(), 0);
  int fd = CreateUprobeMultiLink(s_->throw_prog_fd, s_->guard_path, offsets, cookies, false, child);
  if (fd < 0) return;  // it is gone already, or cannot be probed: as without us
  uint32_t index = s_->slot_count.fetch_add(1);
  if (index >= kMaxSlots) {
    close(fd);
    return;
  }
  Slot& slot = s_->slots[index];
  slot.fd = fd;
  slot.group = UINT32_MAX;  // no group of torchprobe's
  slot.op_id = ProbeKeeper::kReturnGuard;
  slot.pid = child;
  s_->pending.fetch_add(1);
  slot.state.store(kRequested);  // closed once the child is let go
  s_->requests.fetch_add(1);
}

void Keeper::ServeGuards() {
  if (s_->fixing_set.load() == 1) {
    fixer_.SetBpf(s_->fixes_fd, s_->list_prog_fd);  // dups them: they outlive torchprobe's
    fixer_.set_on_fork([this](pid_t child) { GuardForkedChild(child); });
    s_->fixing_set.store(2);
  }
  bool done = owner_dead_ || s_->finished.load();
  bool released = false;
  guards_waiting_ = false;
  uint32_t count = s_->guard_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < count; ++i) {
    Guard& guard = s_->guards[i];
    uint32_t state = guard.state.load();
    if (state == kGuardAsked) {
      std::string why = done ? "torchprobe is stopping" : fixer_.Seize(guard.pid);
      if (!why.empty()) std::snprintf(guard.error, sizeof(guard.error), "%s", why.c_str());
      guard.state.store(why.empty() ? kGuarded : kGuardFailed);
      continue;
    }
    bool wanted = state == kReleaseAsked || (state == kGuarded && done);
    if (!wanted) continue;
    guards_waiting_ = true;
    // Not while any return probe link of the run is open, its own or another
    // process' on the same library: the kernel prepares returns for every
    // uretprobe link on a function, whatever process the link names (see
    // below), so a throw in a process let go early could end it.
    if (HasOpenLinks()) continue;
    // Threads in uninterruptible sleep do not stop: tried again next turn.
    if (fixer_.Release(guard.pid)) {
      guard.state.store(kReleased);
      released = true;
      guards_waiting_ = false;  // (others still waiting set it again next turn)
    }
  }
  // Processes no one asked for (forked by a guarded one, not followed or
  // not yet attached) are let go with the rest once torchprobe is done.
  if (done) {
    for (pid_t pid : fixer_.pids()) {
      bool asked = false;
      for (uint32_t i = 0; i < count; ++i)
        asked |= s_->guards[i].pid == pid && s_->guards[i].state.load() != kReleased;
      if (asked) continue;
      guards_waiting_ = true;
      // It has no links of its own, but the kernel prepares returns for
      // every uretprobe link on a function, whichever process the link
      // names: while any link of the run is open, a call in it may still get
      // a trampoline, and a throw through one unguarded ends it in
      // std::terminate (seen: a forked child let go while its parent's links
      // were being closed after torchprobe was killed).
      if (!HasOpenLinks() && fixer_.Release(pid)) released = true;
    }
  }
  uint64_t guarded = 0;  // asked for and not let go yet: what torchprobe waits for
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t state = s_->guards[i].state.load();
    guarded += (state == kGuarded || state == kReleaseAsked) && fixer_.Tracing(s_->guards[i].pid);
  }
  s_->guarded.store(guarded);
  s_->throws_fixed.store(fixer_.fixes());
  if (released) s_->requests.fetch_add(1);  // their guard links may go now
}

KeeperShared* g_shared = nullptr;  // for the SIGUSR1 handler
void OnRemoveUnusedNow(int) { g_shared->unused_now.store(1); }

void Keeper::Run() {
  setsid();  // out of torchprobe's process group: its Ctrl-C and hang-up are not ours
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU, SIGUSR2}) {
    signal(sig, SIG_IGN);
  }
  g_shared = s_;
  struct sigaction action = {};
  action.sa_handler = OnRemoveUnusedNow;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, nullptr);
  prctl(PR_SET_NAME, "torchprobe-keep", 0, 0, 0);
  int owner_fd = static_cast<int>(syscall(SYS_pidfd_open, owner_, 0));
  uint64_t seen_requests = UINT64_MAX, last_order = 0;
  for (;;) {
    bool busy = next_ < queue_.size();
    // The owner's pidfd stays readable once it has exited: polled until then.
    // Without a pidfd (kernels before 5.3), the parent is checked instead.
    bool watch_owner = owner_fd >= 0 && !owner_dead_;
    // Threads stopped for a fix wait on us: the tracer's events come first.
    pollfd fds[3] = {{fixer_.event_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}, {owner_fd, POLLIN, 0}};
    int timeout = busy ? 0 : (owner_fd >= 0 || owner_dead_ ? 1000 : 100);
    if (guards_waiting_) timeout = std::min(timeout, 5);
    poll(fds, watch_owner ? 3 : 2, timeout);
    fixer_.OnChildEvents();
    if (fds[1].revents & POLLIN) {
      uint64_t ignored;
      (void)!read(wake_fd_, &ignored, sizeof(ignored));
    }
    MapGatedHits();
    bool gone = watch_owner ? (fds[2].revents & (POLLIN | POLLHUP)) != 0
                            : owner_fd < 0 && getppid() != owner_;
    if (gone && !owner_dead_) OnOwnerDeath();
    ServeGuards();
    uint64_t now = NowNs();
    // Re-ordered every second while anything is pending: an unused probe
    // that starts being hit, or whose process exited, becomes closable.
    if (s_->requests.load() != seen_requests ||
        (s_->pending.load() > 0 && now - last_order >= kResortNs)) {
      seen_requests = s_->requests.load();
      last_order = now;
      Order();
    }
    if (next_ < queue_.size()) {
      if (batchable_[next_]) CloseBatch();
      else CloseNext();
      continue;
    }
    if ((owner_dead_ || s_->finished.load()) && s_->pending.load() == 0 && fixer_.pids().empty())
      _exit(0);
  }
}

}  // namespace

StatusOr<std::unique_ptr<ProbeKeeper>> ProbeKeeper::Start() {
  size_t bytes = sizeof(KeeperShared);
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED)
    return Status::Error(std::string("cannot start the probe keeper: ") + std::strerror(errno));
  auto* shared = new (memory) KeeperShared();
  int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    munmap(memory, bytes);
    return Status::Error(std::string("cannot start the probe keeper: ") + std::strerror(errno));
  }
  pid_t owner = getpid();
  // A raw clone: fork's semantics plus the shared fd table.
  long pid = syscall(SYS_clone, CLONE_FILES | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid < 0) {
    int err = errno;
    close(wake_fd);
    munmap(memory, bytes);
    return Status::Error(std::string("cannot start the probe keeper: ") + std::strerror(err));
  }
  if (pid == 0) Keeper(shared, wake_fd, owner).Run();
  return std::unique_ptr<ProbeKeeper>(
      new ProbeKeeper(shared, bytes, wake_fd, static_cast<pid_t>(pid)));
}

ProbeKeeper::~ProbeKeeper() {
  if (!finished_) Finish(false);
  munmap(shared_, shared_bytes_);
}

void ProbeKeeper::Wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void ProbeKeeper::SetMaps(int ctl_fd, int held_fd, int gated_hits_fd) {
  shared_->ctl_fd = ctl_fd;
  shared_->held_fd = held_fd;
  shared_->gated_hits_fd = gated_hits_fd;
  shared_->maps_set.store(1);
  Wake();  // it maps gated_hits now, while the fd surely is torchprobe's
}

uint32_t ProbeKeeper::NewGroup() { return next_group_++; }

void ProbeKeeper::SetReturnFixing(int fixes_fd, int list_prog_fd) {
  shared_->fixes_fd = fixes_fd;
  shared_->list_prog_fd = list_prog_fd;
  shared_->fixing_set.store(1);
  Wake();
}

std::string ProbeKeeper::GuardReturns(pid_t pid) {
  uint32_t index = shared_->guard_count.load();
  if (index >= kMaxGuards) return "too many processes";
  Guard& guard = shared_->guards[index];
  guard.pid = pid;
  guard.error[0] = '\0';
  guard.state.store(kGuardAsked);
  shared_->guard_count.store(index + 1, std::memory_order_release);
  Wake();
  // The keeper answers within its loop's turn; a dead keeper never does.
  for (int waited_ms = 0; guard.state.load() == kGuardAsked; ++waited_ms) {
    if (waited_ms > 5000 || !IsProcessAlive(static_cast<uint32_t>(pid_))) return "the keeper does not answer";
    usleep(1000);
  }
  return guard.state.load() == kGuarded ? "" : guard.error;
}

void ProbeKeeper::SetGuardProbe(const std::string& path, const std::vector<uint64_t>& offsets,
                                int throw_prog_fd) {
  if (shared_->guard_probe_set.load() || path.size() >= sizeof(shared_->guard_path)) return;
  std::snprintf(shared_->guard_path, sizeof(shared_->guard_path), "%s", path.c_str());
  shared_->guard_offset_count = static_cast<uint32_t>(std::min<size_t>(offsets.size(), 8));
  std::copy(offsets.begin(), offsets.begin() + shared_->guard_offset_count, shared_->guard_offsets);
  shared_->throw_prog_fd = throw_prog_fd;
  shared_->guard_probe_set.store(1);
}

void ProbeKeeper::ReleaseReturns(pid_t pid) {
  uint32_t count = shared_->guard_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < count; ++i) {
    Guard& guard = shared_->guards[i];
    uint32_t expected = kGuarded;
    if (guard.pid == pid) guard.state.compare_exchange_strong(expected, kReleaseAsked);
  }
  Wake();
}

void ProbeKeeper::Adopt(int fd, uint32_t group, uint32_t op_id, int pid) {
  // fetch_add: the keeper adds slots of its own (GuardForkedChild); a slot
  // counts once its state is set.
  uint32_t index = shared_->slot_count.fetch_add(1);
  if (index >= kMaxSlots) return;  // never here: the fd limit comes first; torchprobe's exit closes it
  Slot& slot = shared_->slots[index];
  slot.fd = fd;
  slot.group = group;
  slot.op_id = op_id;
  slot.pid = pid;
  slot.state.store(kLive);
}

void ProbeKeeper::SetCalls(uint32_t op_id, uint64_t calls) {
  if (op_id < TP_MAX_OPS) shared_->calls[op_id].store(calls, std::memory_order_relaxed);
}

void ProbeKeeper::Release(uint32_t group) {
  uint32_t count = shared_->slot_count.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < count; ++i) {
    Slot& slot = shared_->slots[i];
    uint32_t expected = kLive;
    if ((group == 0 || slot.group == group) && slot.state.compare_exchange_strong(expected, kRequested))
      shared_->pending.fetch_add(1);
  }
  shared_->requests.fetch_add(1);
  Wake();
}

void ProbeKeeper::ReleaseAll() { Release(0); }

ProbeKeeper::Progress ProbeKeeper::progress() const {
  Progress p;
  p.pending = shared_->pending.load();
  // Until the keeper has ordered the latest request, count all as hot.
  p.pending_hot = shared_->sorted_requests.load() == shared_->requests.load()
                      ? std::min<uint64_t>(shared_->pending_hot.load(), p.pending)
                      : p.pending;
  p.closed = shared_->closed.load();
  p.guarded = shared_->guarded.load();
  p.throws_fixed = shared_->throws_fixed.load();
  p.closable = shared_->sorted_requests.load() == shared_->requests.load()
                   ? std::min<uint64_t>(shared_->closable.load(), p.pending)
                   : p.pending;
  return p;
}

void ProbeKeeper::Finish(bool wait) {
  finished_ = true;
  shared_->maps_set.store(0);  // torchprobe closes them as it exits: no longer the keeper's to use
  shared_->finished.store(1);
  Wake();
  if (!wait) return;
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace torchprobe
