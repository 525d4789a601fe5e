// The keeper process; see the header for why it exists.
//
// torchprobe and the keeper share two things: the file descriptor table
// (CLONE_FILES) and one MAP_SHARED region, KeeperShared, through which
// torchprobe registers links and asks for them to be closed. The keeper is
// a copy of torchprobe made by a raw clone: it must not use pthreads or
// raise() (glibc's cached thread id is torchprobe's), and while torchprobe
// lives it must never close or write to an fd that is not a link it was
// given (the table is torchprobe's too).
//
// Once torchprobe is gone (its pidfd is readable: it exited or was killed),
// the keeper and its closers are the table's only holders, and whatever
// torchprobe left open there would live as long as the keeper: the caller's
// stdout and stderr pipes (a `$(torchprobe ...)` or CI `communicate()` would
// wait for the keeper), a killed run's unnamed trace file, the CUPTI socket
// (the injected collector would stay subscribed), the BPF maps and programs.
// So the keeper then closes every fd but the links it still has to close
// and its own (return_fixer.h's duplicates, the unwinder program's
// duplicate), and points 0-2 at /dev/null. The gated_hits mapping outlives
// its fd.
//
// Closers: a link's last close waits for grace periods (~50-85 ms for a
// per-symbol uprobe, under kernel locks that other tracers' uprobe opens
// and closes on the host wait for), so closes are made by closers, clones
// that make one close and exit, and the keeper's loop never waits for one: it reaps each with WNOHANG as it ends, and keeps
// serving guard requests and watching torchprobe meanwhile. At most
// kMaxHotClosers at once for links the target hits (torchprobe and the
// target wait on them; concurrent removals share grace periods), at most
// kMaxCalmClosers at once for the removals no one waits for; see there.
#include "userspace/attach/probe_keeper.h"
#include "userspace/base/clock.h"

#include <bpf/bpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "bpf/events.h"
#include "userspace/attach/return_fixer.h"
#include "userspace/attach/uprobe_multi.h"
#include "userspace/base/proc_maps.h"

namespace torchprobe {

namespace {

// kClosed: a closer is closing it; kDone: its close has returned.
enum SlotState : uint32_t { kLive = 1, kRequested = 2, kClosed = 3, kDone = 4 };

// An atomic word whose construction writes nothing: the slots live in a
// fresh anonymous mapping, already zero, and constructing 1M std::atomic
// (value-initialised since C++20) touched all 40 MB of them: ~170 ms at
// every record's start, measured here, most of a triggered window's delay.
class QuietAtomic {
 public:
  uint32_t load() const { return Ref().load(); }
  void store(uint32_t value) { Ref().store(value); }
  bool compare_exchange_strong(uint32_t& expected, uint32_t desired) {
    return Ref().compare_exchange_strong(expected, desired);
  }

 private:
  std::atomic_ref<uint32_t> Ref() const { return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(value_)); }
  alignas(std::atomic_ref<uint32_t>::required_alignment) uint32_t value_;
};
static_assert(std::is_trivially_default_constructible_v<QuietAtomic>);

struct Slot {
  int32_t fd;
  uint32_t group;
  uint32_t op_id;
  int32_t pid;  // the process the link probes (> 0), or every process (-1)
  QuietAtomic state;
  uint64_t witness;          // an address in `pid` that holds a breakpoint of the link's (0: none known)
  QuietAtomic hot;           // ordered as a link the target hits
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
constexpr uint8_t kBreakpoint = 0xcc;     // int3: what a uprobe writes at its address
constexpr uint32_t kMaxGuards = TP_MAX_PIDS;
constexpr uint64_t kResortNs = 1'000'000'000;
constexpr size_t kCloserStack = 16 << 10;

// How a requested link goes.
enum Haste : uint8_t {
  // The target hits it, or it holds every op (uprobe_multi, catch, loader):
  // the target runs slower until it is gone, and torchprobe waits for it.
  kHot,
  // No one waits: its process exited, it probes every process (launch
  // mode), it is a guard let go, or SIGUSR1 asked for everything now.
  kCalm,
  // Never hit, in a live process, asked to go by SIGUSR2: one at a time,
  // resting between removals as long as each took (see kGentleRest): the
  // other tracers on the host barely wait (opens under 1 ms each, measured).
  kGentle,
};

// Concurrent closers. Hot: removals share grace periods (5 uprobe_multi
// links: 224 ms one by one, 88 ms together, measured here), and the target
// is slowed until they are gone. Calm: per-symbol removals serialize on the
// kernel's event_mutex, so more closers buy little (exited process,
// per-symbol uprobes, measured here: 1 closer 11.8/s, 2 15.5/s, 4 15-18/s,
// 16 24/s) while each one is a task in uninterruptible sleep (the load
// average: 16 per keeper made a 2-core host's load 12) and one more grace
// period that other tracers' uprobe attaches and detaches on the host wait
// behind (another process' per-symbol opens: 0.1-0.7 ms each alone, 1-10
// beside two closers). Two keep most of the speed at the cost of two.
constexpr size_t kMaxHotClosers = 16;
constexpr size_t kMaxCalmClosers = 2;
constexpr size_t kMaxClosers = kMaxHotClosers + kMaxCalmClosers;
// A gentle removal is followed by a rest this many times as long as it
// took: the keeper holds the kernel's uprobe lock at most half the time.
constexpr uint64_t kGentleRest = 1;
// While closers run, the loop looks for their ends this often.
constexpr int kCloserPollMs = 5;

// A closer: a thread-like clone (same memory, same fd table) that makes one
// last close and exits. It runs nothing of glibc but the syscall wrapper
// (its TLS is the keeper's: no errno is read). Named so that `ps` tells it
// from its keeper.
int CloserMain(void* fd) {
  syscall(SYS_prctl, PR_SET_NAME, "torchprobe-drop", 0, 0, 0);
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
  std::atomic<uint64_t> requests;       // bumped by each Release, SIGUSR1 and SIGUSR2
  std::atomic<uint64_t> sorted_requests;  // the keeper has ordered up to this request
  std::atomic<uint64_t> pending;        // requested, not closed
  std::atomic<uint64_t> pending_hot;    // ... hot, as of the last ordering
  std::atomic<uint64_t> closed;
  std::atomic<uint32_t> unused_now;     // remove unused probes now too (SIGUSR1)
  std::atomic<uint32_t> unused_gently;  // ... gently (SIGUSR2)
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
  struct Closer {
    pid_t pid;
    uint32_t slot;
    Haste haste;
    uint32_t stack;     // its stack, of kMaxClosers
    uint64_t start_ns;  // CLOCK_MONOTONIC
  };

  void OnOwnerDeath();
  // torchprobe is gone: every fd of the table but the links still to close
  // and the keeper's own is closed, and 0-2 point at /dev/null (see above).
  void CloseInheritedFds();
  // The requested links that may go now, by haste, hottest first; the rest
  // (never hit, in a live process) stay in place: see the header.
  void Order();
  // Starts closers for the queue's next links while their haste allows.
  void StartClosers(uint64_t now);
  // Reaps the closers that have ended and counts their links closed.
  void ReapClosers(uint64_t now);
  size_t HotClosers() const;
  // The shared counters after a requested link was closed.
  void CountClosed(bool hot);
  // Calls seen by torchprobe plus hits since the gate closed.
  uint64_t Heat(uint32_t op_id) const;
  void MapGatedHits();
  // Duplicates the fds of torchprobe's that the keeper goes on using, while
  // torchprobe surely holds them: the fixer's map and program, the unwinder
  // program.
  void TakeFds();
  // Guard requests: trace the processes asked for, release the ones whose
  // return probes are all gone.
  void ServeGuards();
  // Return probe links of the run still open (asked to close or not).
  bool HasOpenLinks() const;
  // A forked child of a guarded process gets its own unwinder probe, owned
  // and closed by the keeper like torchprobe's links.
  void GuardForkedChild(pid_t child);
  int PollTimeoutMs(uint64_t now) const;

  KeeperShared* s_;
  ReturnFixer fixer_;
  bool guards_waiting_ = false;  // a release is wanted: look again soon
  int wake_fd_;
  int owner_fd_ = -1;  // torchprobe's pidfd
  pid_t owner_;
  bool owner_dead_ = false;
  int throw_prog_fd_ = -1;  // the unwinder program (GuardForkedChild), the keeper's duplicate

  std::vector<uint32_t> queue_;  // requested slots that may go now, by haste, hottest first
  std::vector<Haste> haste_;     // parallel to queue_
  size_t next_ = 0;
  std::vector<Closer> closers_;  // running
  std::vector<uint32_t> free_stacks_;
  uint64_t gentle_at_ns_ = 0;    // no gentle removal starts before (CLOCK_MONOTONIC)
  const volatile uint32_t* gated_hits_ = nullptr;  // the BPF map, mapped
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

size_t Keeper::HotClosers() const {
  size_t hot = 0;
  for (const Closer& closer : closers_) hot += closer.haste == kHot;
  return hot;
}

void Keeper::Order() {
  uint64_t requests = s_->requests.load();
  bool all_now = s_->unused_now.load() != 0, gently = s_->unused_gently.load() != 0;
  // Whether a process exited (a zombie too: nothing to unpatch, nothing to
  // harm); once per process and ordering, there are thousands of slots.
  std::unordered_map<int32_t, bool> gone;
  auto exited = [&gone](int32_t pid) {
    auto [it, inserted] = gone.try_emplace(pid, false);
    if (inserted) it->second = !IsProcessAlive(static_cast<uint32_t>(pid));
    return it->second;
  };
  struct Entry {
    Haste haste;
    uint64_t heat;
    uint32_t slot;
  };
  std::vector<Entry> order;
  uint32_t count = std::min(s_->slot_count.load(std::memory_order_acquire), kMaxSlots);
  for (uint32_t i = 0; i < count; ++i) {
    const Slot& slot = s_->slots[i];
    if (slot.state.load() != kRequested) continue;
    // A guard link may go only once its process was let go: nothing of
    // torchprobe's is left there to wait for.
    bool guard = slot.op_id == ProbeKeeper::kReturnGuard;
    if (guard && fixer_.Tracing(slot.pid)) continue;
    uint64_t heat = Heat(slot.op_id);
    if (heat > 0 && !guard) {
      s_->slots[i].hot.store(1);  // HotInCode looks at it
      order.push_back({kHot, heat, i});
    } else if (guard || slot.pid <= 0 || all_now || exited(slot.pid)) order.push_back({kCalm, heat, i});
    else if (gently) order.push_back({kGentle, heat, i});
  }
  std::stable_sort(order.begin(), order.end(), [](const Entry& a, const Entry& b) {
    return a.haste != b.haste ? a.haste < b.haste : a.heat > b.heat;
  });
  queue_.clear();
  haste_.clear();
  uint64_t hot = HotClosers();
  for (const Entry& entry : order) {
    queue_.push_back(entry.slot);
    haste_.push_back(entry.haste);
    hot += entry.haste == kHot;
  }
  next_ = 0;
  s_->pending_hot.store(hot);
  s_->sorted_requests.store(requests);
}

void Keeper::StartClosers(uint64_t now) {
  static char stacks[kMaxClosers][kCloserStack] __attribute__((aligned(16)));
  while (next_ < queue_.size()) {
    Haste haste = haste_[next_];
    size_t hot = HotClosers(), calm = closers_.size() - hot;
    if (haste == kHot ? hot >= kMaxHotClosers : calm >= kMaxCalmClosers) return;
    if (haste == kGentle && (calm > 0 || now < gentle_at_ns_)) return;
    uint32_t index = queue_[next_++];
    Slot& slot = s_->slots[index];
    uint32_t expected = kRequested;
    if (!slot.state.compare_exchange_strong(expected, kClosed)) continue;
    uint32_t stack = free_stacks_.back();
    int pid = clone(CloserMain, stacks[stack] + kCloserStack, CLONE_VM | CLONE_FILES | CLONE_UNTRACED,
                    reinterpret_cast<void*>(static_cast<intptr_t>(slot.fd)));
    if (pid > 0) {
      free_stacks_.pop_back();
      closers_.push_back({pid, index, haste, stack, now});
    } else if (closers_.empty()) {
      close(slot.fd);  // no clone (out of processes): here, one at a time
      slot.state.store(kDone);
      CountClosed(haste == kHot);
    } else {
      slot.state.store(kRequested);  // tried again once a closer has ended
      --next_;
      return;
    }
  }
}

void Keeper::ReapClosers(uint64_t now) {
  for (auto it = closers_.begin(); it != closers_.end();) {
    // No exit signal: __WALL. ECHILD when the fixer's waitpid(-1) took it.
    pid_t pid = waitpid(it->pid, nullptr, __WALL | WNOHANG);
    if (pid == 0 || (pid < 0 && errno != ECHILD)) {
      ++it;
      continue;
    }
    if (it->haste == kGentle) gentle_at_ns_ = now + (now - it->start_ns) * kGentleRest;
    s_->slots[it->slot].state.store(kDone);
    CountClosed(it->haste == kHot);
    free_stacks_.push_back(it->stack);
    it = closers_.erase(it);
  }
}

void Keeper::CountClosed(bool hot) {
  s_->pending.fetch_sub(1);
  if (hot) s_->pending_hot.fetch_sub(1);
  s_->closed.fetch_add(1);
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
    s_->maps_set.store(0);  // closed below
  }
  uint32_t count = std::min(s_->slot_count.load(std::memory_order_acquire), kMaxSlots);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t expected = kLive;
    if (s_->slots[i].state.compare_exchange_strong(expected, kRequested)) s_->pending.fetch_add(1);
  }
  s_->requests.fetch_add(1);
  CloseInheritedFds();
}

void Keeper::CloseInheritedFds() {
  std::vector<int> keep = fixer_.fds();
  if (throw_prog_fd_ >= 0) keep.push_back(throw_prog_fd_);
  uint32_t count = std::min(s_->slot_count.load(std::memory_order_acquire), kMaxSlots);
  for (uint32_t i = 0; i < count; ++i)
    if (s_->slots[i].state.load() == kRequested) keep.push_back(s_->slots[i].fd);
  for (const Closer& closer : closers_) keep.push_back(s_->slots[closer.slot].fd);
  std::sort(keep.begin(), keep.end());
  auto kept = [&keep](int fd) { return std::binary_search(keep.begin(), keep.end(), fd); };
  // No one is left to wake the keeper or to exit.
  wake_fd_ = -1;
  owner_fd_ = -1;
  std::vector<int> open_fds;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir)) {
      int fd = std::atoi(entry->d_name);
      if (entry->d_name[0] != '.' && fd != dirfd(dir)) open_fds.push_back(fd);
    }
    closedir(dir);
  } else {
    for (long fd = 0, limit = sysconf(_SC_OPEN_MAX); fd < limit; ++fd) open_fds.push_back(static_cast<int>(fd));
  }
  for (int fd : open_fds)
    if (fd > 2 && !kept(fd)) close(fd);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd <= 2; ++fd) {
    if (kept(fd) || fd == null) continue;
    if (null >= 0) dup2(null, fd);
    else close(fd);
  }
  if (null > 2) close(null);
}

bool Keeper::HasOpenLinks() const {
  // A link a closer is closing is open until the closer has ended.
  for (const Closer& closer : closers_)
    if (s_->slots[closer.slot].op_id != ProbeKeeper::kReturnGuard) return true;
  uint32_t count = std::min(s_->slot_count.load(std::memory_order_acquire), kMaxSlots);
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
  if (throw_prog_fd_ < 0) return;
  std::vector<uint64_t> offsets(s_->guard_offsets, s_->guard_offsets + s_->guard_offset_count);
  std::vector<uint64_t> cookies(offsets.size(), 0);
  int fd = CreateUprobeMultiLink(throw_prog_fd_, s_->guard_path, offsets, cookies, false, child);
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

void Keeper::TakeFds() {
  if (s_->fixing_set.load() == 1) {
    fixer_.SetBpf(s_->fixes_fd, s_->list_prog_fd);  // dups them: they outlive torchprobe's
    fixer_.set_on_fork([this](pid_t child) { GuardForkedChild(child); });
    s_->fixing_set.store(2);
  }
  if (s_->guard_probe_set.load() == 1) {
    throw_prog_fd_ = fcntl(s_->throw_prog_fd, F_DUPFD_CLOEXEC, 3);
    s_->guard_probe_set.store(2);
  }
}

void Keeper::ServeGuards() {
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

// Signal handlers: lock-free atomics only. A new request has the links
// ordered again at once.
KeeperShared* g_shared = nullptr;
void OnRemoveUnusedNow(int) {
  g_shared->unused_now.store(1);
  g_shared->requests.fetch_add(1);
}
void OnRemoveUnusedGently(int) {
  g_shared->unused_gently.store(1);
  g_shared->requests.fetch_add(1);
}

int Keeper::PollTimeoutMs(uint64_t now) const {
  // Without a pidfd (kernels before 5.3), the parent is checked instead.
  int timeout = owner_fd_ >= 0 || owner_dead_ ? 1000 : 100;
  if (!closers_.empty()) timeout = kCloserPollMs;
  else if (next_ < queue_.size())
    timeout = std::clamp<int>(static_cast<int>((std::max(gentle_at_ns_, now) - now) / 1'000'000) + 1, 1, timeout);
  if (guards_waiting_) timeout = std::min(timeout, 5);
  return timeout;
}

void Keeper::Run() {
  setsid();  // out of torchprobe's process group: its Ctrl-C and hang-up are not ours
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) {
    signal(sig, SIG_IGN);
  }
  // Nor the OOM killer's: killed, the keeper would make its links' last
  // close in a dying process, the leak it exists to prevent. It is small.
  int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom >= 0) {
    (void)!write(oom, "-1000", 5);
    close(oom);
  }
  g_shared = s_;
  struct sigaction action = {};
  sigemptyset(&action.sa_mask);
  action.sa_handler = OnRemoveUnusedNow;
  sigaction(SIGUSR1, &action, nullptr);
  action.sa_handler = OnRemoveUnusedGently;
  sigaction(SIGUSR2, &action, nullptr);
  prctl(PR_SET_NAME, "torchprobe-keep", 0, 0, 0);
  owner_fd_ = static_cast<int>(syscall(SYS_pidfd_open, owner_, 0));
  for (uint32_t i = 0; i < kMaxClosers; ++i) free_stacks_.push_back(i);
  uint64_t seen_requests = UINT64_MAX, last_order = 0;
  for (;;) {
    // The owner's pidfd stays readable once it has exited: polled until then.
    bool watch_owner = owner_fd_ >= 0 && !owner_dead_;
    // Threads stopped for a fix wait on us: the tracer's events come first.
    pollfd fds[3] = {{fixer_.event_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0},
                     {watch_owner ? owner_fd_ : -1, POLLIN, 0}};
    poll(fds, 3, PollTimeoutMs(NowNs()));
    fixer_.OnChildEvents();
    if (fds[1].revents & POLLIN) {
      uint64_t ignored;
      (void)!read(wake_fd_, &ignored, sizeof(ignored));
    }
    MapGatedHits();
    TakeFds();
    bool gone = watch_owner ? (fds[2].revents & (POLLIN | POLLHUP)) != 0
                            : owner_fd_ < 0 && getppid() != owner_;
    if (gone && !owner_dead_) OnOwnerDeath();
    ServeGuards();
    uint64_t now = NowNs();
    ReapClosers(now);
    // Re-ordered every second while anything is pending: an unused probe
    // that starts being hit, or whose process exited, may go.
    if (s_->requests.load() != seen_requests ||
        (s_->pending.load() > 0 && now - last_order >= kResortNs)) {
      seen_requests = s_->requests.load();
      last_order = now;
      Order();
    }
    StartClosers(now);
    if ((owner_dead_ || s_->finished.load()) && s_->pending.load() == 0 && closers_.empty() &&
        fixer_.pids().empty())
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
  // Default-initialised, not value-initialised: the mapping is zero and the
  // slots are left untouched until used (see QuietAtomic).
  auto* shared = new (memory) KeeperShared;
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

void ProbeKeeper::Adopt(int fd, uint32_t group, uint32_t op_id, int pid, uint64_t witness) {
  // fetch_add: the keeper adds slots of its own (GuardForkedChild); a slot
  // counts once its state is set.
  uint32_t index = shared_->slot_count.fetch_add(1);
  if (index >= kMaxSlots) return;  // never here: the fd limit comes first; torchprobe's exit closes it
  Slot& slot = shared_->slots[index];
  slot.fd = fd;
  slot.group = group;
  slot.op_id = op_id;
  slot.pid = pid;
  slot.witness = pid > 0 ? witness : 0;
  slot.hot.store(0);
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
  return p;
}

size_t ProbeKeeper::HotInCode() const {
  Progress p = progress();
  if (shared_->sorted_requests.load() != shared_->requests.load()) return p.pending;  // not ordered yet: all
  if (p.pending_hot == 0) return 0;
  size_t in_code = 0;
  uint32_t count = std::min(shared_->slot_count.load(std::memory_order_acquire), kMaxSlots);
  for (uint32_t i = 0; i < count; ++i) {
    const Slot& slot = shared_->slots[i];
    uint32_t state = slot.state.load();
    if (!slot.hot.load() || state == kDone || state == kLive) continue;
    if (slot.witness == 0) {
      ++in_code;  // nothing to look at: in place until its close returns
      continue;
    }
    // The byte at the witness: the breakpoint while the link is in the
    // code, the instruction again once the kernel took it out. A process
    // that is gone holds nothing.
    uint8_t byte = 0;
    iovec local{&byte, 1}, remote{reinterpret_cast<void*>(slot.witness), 1};
    if (process_vm_readv(slot.pid, &local, 1, &remote, 1, 0) == 1 && byte == kBreakpoint) ++in_code;
  }
  return in_code;
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
