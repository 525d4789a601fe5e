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

constexpr uint32_t kMaxSlots = 1u << 20;  // links of one run (per-symbol: ~12k per process)
constexpr uint64_t kResortNs = 1'000'000'000;

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
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
  // Calls seen by torchprobe plus hits since the gate closed.
  uint64_t Heat(uint32_t op_id) const;
  void MapGatedHits();

  KeeperShared* s_;
  int wake_fd_;
  pid_t owner_;
  bool owner_dead_ = false;
  // Whether a requested, never-hit link may be closed now: see the header.
  bool MayCloseUnused(const Slot& slot, std::unordered_map<int32_t, bool>* gone);

  std::vector<uint32_t> queue_;  // requested slots to close now, hottest first
  std::vector<bool> hot_;        // parallel to queue_
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
  if (op_id == ProbeKeeper::kAlwaysHot) return UINT64_MAX;
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
    uint64_t heat = Heat(slot.op_id);
    if (heat > 0 || MayCloseUnused(slot, &gone)) order.emplace_back(heat, i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  queue_.clear();
  hot_.clear();
  uint64_t hot = 0;
  for (const auto& [heat, slot] : order) {
    queue_.push_back(slot);
    hot_.push_back(heat > 0);
    hot += heat > 0;
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
  s_->pending.fetch_sub(1);
  if (hot) s_->pending_hot.fetch_sub(1);
  s_->closable.fetch_sub(1);
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
  }
  uint32_t count = s_->slot_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t expected = kLive;
    if (s_->slots[i].state.compare_exchange_strong(expected, kRequested)) s_->pending.fetch_add(1);
  }
  s_->requests.fetch_add(1);
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
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {owner_fd, POLLIN, 0}};
    poll(fds, watch_owner ? 2 : 1, busy ? 0 : (owner_fd >= 0 || owner_dead_ ? 1000 : 100));
    if (fds[0].revents & POLLIN) {
      uint64_t ignored;
      (void)!read(wake_fd_, &ignored, sizeof(ignored));
    }
    MapGatedHits();
    bool gone = watch_owner ? (fds[1].revents & (POLLIN | POLLHUP)) != 0
                            : owner_fd < 0 && getppid() != owner_;
    if (gone && !owner_dead_) OnOwnerDeath();
    uint64_t now = MonotonicNs();
    // Re-ordered every second while anything is pending: an unused probe
    // that starts being hit, or whose process exited, becomes closable.
    if (s_->requests.load() != seen_requests ||
        (s_->pending.load() > 0 && now - last_order >= kResortNs)) {
      seen_requests = s_->requests.load();
      last_order = now;
      Order();
    }
    if (next_ < queue_.size()) {
      CloseNext();
      continue;
    }
    if ((owner_dead_ || s_->finished.load()) && s_->pending.load() == 0) _exit(0);
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

void ProbeKeeper::Adopt(int fd, uint32_t group, uint32_t op_id, int pid) {
  uint32_t index = shared_->slot_count.load(std::memory_order_relaxed);
  if (index >= kMaxSlots) return;  // never here: the fd limit comes first; torchprobe's exit closes it
  Slot& slot = shared_->slots[index];
  slot.fd = fd;
  slot.group = group;
  slot.op_id = op_id;
  slot.pid = pid;
  slot.state.store(kLive);
  shared_->slot_count.store(index + 1, std::memory_order_release);
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
