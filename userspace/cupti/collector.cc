// libtorchprobe_cupti.so: loaded into the target by the CUDA driver
// (CUDA_INJECTION64_PATH, which calls InitializeInjection), or by torchprobe
// into a running process (record --inject-cupti, which calls
// torchprobe_cupti_attach there, once per run), it asks CUPTI for
// the GPU's activity records — kernels, copies, fills, runtime and driver
// API calls, synchronizations — stamped on CLOCK_MONOTONIC, and streams them
// to torchprobe (record_stream.h). It uses the CUPTI the process already
// mapped (a wheel's libcupti.so.13), else the one $TORCHPROBE_CUPTI_LIBRARY
// or the loader finds: it links none, so it never brings a second copy.
//
// It must never harm the target: nothing here blocks a target thread or
// writes to its stdout/stderr. The socket is non-blocking; a datagram it will
// not take is dropped and counted; torchprobe gone, the collector stops
// asking CUPTI for records and unsubscribes. Another CUPTI subscriber (the in-process
// profiler got there first) means no GPU records: torchprobe is told in one
// line and traces the CPU side only.
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>
#include <cupti_version.h>
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <condition_variable>
#include <deque>
#include <chrono>
#include <thread>
#include <unordered_map>
#include <vector>

#include "userspace/cupti/record_stream.h"

// The record layouts read: the Makefile names the newest versions the CUPTI
// header it builds against declares (CUPTI hands out its newest); these
// defaults are CUPTI 11.8's.
#ifndef TPC_KERNEL_RECORD
#define TPC_KERNEL_RECORD CUpti_ActivityKernel8
#endif
#ifndef TPC_MEMCPY_RECORD
#define TPC_MEMCPY_RECORD CUpti_ActivityMemcpy5
#endif
#ifndef TPC_MEMSET_RECORD
#define TPC_MEMSET_RECORD CUpti_ActivityMemset4
#endif
#ifndef TPC_SYNC_RECORD
#define TPC_SYNC_RECORD CUpti_ActivitySynchronization
#endif

namespace {

// The CUPTI functions used, found at run time (see the top of the file).
struct Cupti {
  CUptiResult (*Subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
  CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
  CUptiResult (*EnableDomain)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
  CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
  CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
  CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*ActivityFlushAll)(uint32_t);
  CUptiResult (*ActivityGetNextRecord)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t*);
  CUptiResult (*GetTimestamp)(uint64_t*);
  CUptiResult (*GetVersion)(uint32_t*);
  // Optional: older CUPTIs lack it, and then the clock offset is sent.
  CUptiResult (*ActivityRegisterTimestampCallback)(uint64_t (*)(void));
};

constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
};
constexpr size_t kBufferBytes = 1 << 20;
constexpr uint64_t kFlushPeriodNs = 100'000'000;  // records reach torchprobe within ~this

Cupti g_cupti;
int g_socket = -1;
std::atomic<bool> g_gone{false};       // torchprobe is gone: drop everything
std::atomic<bool> g_stopping{false};   // the process exits
std::mutex g_send_mutex;               // the datagram being filled
// Never destroyed: CUPTI's threads (and our flush thread) may still hand
// over a buffer while the process runs its static destructors at exit.
std::vector<uint8_t>& g_datagram = *new std::vector<uint8_t>;
uint64_t g_sent = 0, g_dropped = 0;  // records; under g_queue_mutex
uint64_t g_unknown = 0;              // under g_send_mutex
uint32_t g_pid = 0;
std::mutex g_start_mutex;  // Start against StopCollecting (a torchprobe leaving, another coming)
CUpti_SubscriberHandle g_subscriber = nullptr;  // ours while subscribed; under g_start_mutex
tpc_hello g_hello{};                            // the clock CUPTI was given at subscribing; same
bool g_flushing = false;                        // FlushLoop runs; same
bool g_exit_handler = false;                    // AtExit registered; same
bool g_cupti_loaded = false;                    // g_cupti filled; same

// CUPTI's API records name threads its own way; the first API call each
// thread makes is seen in our callback too, with its correlation id and
// the thread's real tid, which teaches us CUPTI's id for it.
std::mutex g_threads_mutex;
std::unordered_map<uint32_t, uint32_t>& g_first_calls = *new std::unordered_map<uint32_t, uint32_t>;  // correlation -> tid
std::unordered_map<uint32_t, uint32_t>& g_thread_tids = *new std::unordered_map<uint32_t, uint32_t>;  // CUPTI threadId -> tid
thread_local bool t_seen = false;

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

template <typename F>
bool Find(void* lib, const char* name, F* out) {
  void* p = lib ? dlsym(lib, name) : nullptr;
  if (!p) p = dlsym(RTLD_DEFAULT, name);
  *out = reinterpret_cast<F>(p);
  return p != nullptr;
}

bool LoadCupti() {
  // A CUPTI already in the process comes first (RTLD_DEFAULT), then ours.
  void* lib = nullptr;
  if (!dlsym(RTLD_DEFAULT, "cuptiSubscribe")) {
    const char* env = getenv("TORCHPROBE_CUPTI_LIBRARY");
    for (const char* name : {env, "libcupti.so", "libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8"}) {
      if (name && (lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!lib) return false;
  }
  Cupti& c = g_cupti;
  bool ok = Find(lib, "cuptiSubscribe", &c.Subscribe) && Find(lib, "cuptiUnsubscribe", &c.Unsubscribe) &&
            Find(lib, "cuptiEnableDomain", &c.EnableDomain) &&
            Find(lib, "cuptiActivityEnable", &c.ActivityEnable) &&
            Find(lib, "cuptiActivityDisable", &c.ActivityDisable) &&
            Find(lib, "cuptiActivityRegisterCallbacks", &c.ActivityRegisterCallbacks) &&
            Find(lib, "cuptiActivityFlushAll", &c.ActivityFlushAll) &&
            Find(lib, "cuptiActivityGetNextRecord", &c.ActivityGetNextRecord) &&
            Find(lib, "cuptiActivityGetNumDroppedRecords", &c.ActivityGetNumDroppedRecords) &&
            Find(lib, "cuptiGetTimestamp", &c.GetTimestamp) && Find(lib, "cuptiGetVersion", &c.GetVersion);
  Find(lib, "cuptiActivityRegisterTimestampCallback", &c.ActivityRegisterTimestampCallback);
  return ok;
}

// Datagrams go out from a thread of our own: torchprobe reads them on its
// own thread, but the kernel queues only a few datagrams per socket
// (net.unix.max_dgram_qlen, 10 by default), and CUPTI hands over a whole
// buffer at once. The queue is bounded; past the bound, and once torchprobe
// is gone, records are dropped and counted.
constexpr size_t kQueueBytes = 64 << 20;
constexpr int kSendWaitMs = 100;  // per wait for room in torchprobe's queue

struct Queued {
  std::vector<uint8_t> bytes;
  size_t records;
};
// Never destroyed, like the queue: the sender thread waits on them while
// the process runs its static destructors (glibc's pthread_cond_destroy
// would wait for it forever).
std::mutex& g_queue_mutex = *new std::mutex;
std::condition_variable& g_queue_cv = *new std::condition_variable;  // something queued, or the queue emptied
std::deque<Queued>& g_queue = *new std::deque<Queued>;
size_t g_queue_bytes = 0;     // under g_queue_mutex
bool g_queue_busy = false;    // the sender holds a datagram; under g_queue_mutex
std::once_flag g_sender_started;

// Sends one datagram, waiting for room as long as torchprobe is there.
bool SendOne(const std::vector<uint8_t>& bytes) {
  while (!g_gone.load(std::memory_order_relaxed)) {
    ssize_t n = send(g_socket, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes.size())) return true;
    if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS && errno != EINTR)) {
      g_gone = true;  // ECONNREFUSED: torchprobe closed its socket
      break;
    }
    pollfd pfd{g_socket, POLLOUT, 0};
    poll(&pfd, 1, kSendWaitMs);
  }
  return false;
}

void SenderLoop() {
  std::unique_lock<std::mutex> lock(g_queue_mutex);
  for (;;) {
    g_queue_cv.wait(lock, [] { return !g_queue.empty(); });
    Queued next = std::move(g_queue.front());
    g_queue.pop_front();
    g_queue_bytes -= next.bytes.size();
    g_queue_busy = true;
    lock.unlock();
    bool sent = SendOne(next.bytes);
    lock.lock();
    g_queue_busy = false;
    if (sent) g_sent += next.records;
    else g_dropped += next.records;
    if (g_queue.empty()) g_queue_cv.notify_all();
  }
}

// Waits (at most `ms`) until the sender has sent everything queued.
void WaitForSender(int ms) {
  std::unique_lock<std::mutex> lock(g_queue_mutex);
  g_queue_cv.wait_for(lock, std::chrono::milliseconds(ms), [] { return g_queue.empty() && !g_queue_busy; });
}

// Queues the datagram being filled; under g_send_mutex.
void SendDatagram(size_t records) {
  if (g_datagram.empty()) return;
  std::call_once(g_sender_started, [] { std::thread(SenderLoop).detach(); });
  std::lock_guard<std::mutex> lock(g_queue_mutex);
  if (g_gone.load(std::memory_order_relaxed) || g_queue_bytes + g_datagram.size() > kQueueBytes) {
    g_dropped += records;
  } else {
    g_queue_bytes += g_datagram.size();
    g_queue.push_back(Queued{g_datagram, records});
    g_queue_cv.notify_all();
  }
  g_datagram.clear();
}

size_t g_pending_records = 0;  // in g_datagram; under g_send_mutex

// Appends one record (header filled here) and `tail` after it.
void Append(uint16_t type, void* record, size_t size, const void* tail = nullptr, size_t tail_size = 0) {
  auto* hdr = static_cast<tpc_header*>(record);
  hdr->type = type;
  hdr->size = static_cast<uint16_t>(size + tail_size);
  hdr->pid = g_pid;
  if (g_datagram.size() + size + tail_size > TPC_MAX_DATAGRAM) {
    SendDatagram(g_pending_records);
    g_pending_records = 0;
  }
  const auto* p = static_cast<const uint8_t*>(record);
  g_datagram.insert(g_datagram.end(), p, p + size);
  if (tail_size) {
    const auto* t = static_cast<const uint8_t*>(tail);
    g_datagram.insert(g_datagram.end(), t, t + tail_size);
  }
  ++g_pending_records;
}

void Flush() {
  SendDatagram(g_pending_records);
  g_pending_records = 0;
}

template <typename R>
tpc_activity Activity(const R& r, uint32_t graph_id) {
  tpc_activity a{};
  a.start_ns = r.start;
  a.end_ns = r.end;
  a.correlation = r.correlationId;
  a.device = r.deviceId;
  a.context = r.contextId;
  a.stream = r.streamId;
  a.graph_id = graph_id;
  return a;
}

uint32_t ThreadTid(uint32_t cupti_thread, uint32_t correlation) {
  std::lock_guard<std::mutex> lock(g_threads_mutex);
  auto first = g_first_calls.find(correlation);
  if (first != g_first_calls.end()) {
    g_thread_tids[cupti_thread] = first->second;
    g_first_calls.erase(first);
  }
  auto it = g_thread_tids.find(cupti_thread);
  return it == g_thread_tids.end() ? 0 : it->second;
}

// One CUPTI record into the stream; under g_send_mutex.
void Forward(const CUpti_Activity* record) {
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = *reinterpret_cast<const TPC_KERNEL_RECORD*>(record);
      tpc_kernel out{};
      out.a = Activity(k, k.graphId);
      out.grid[0] = k.gridX, out.grid[1] = k.gridY, out.grid[2] = k.gridZ;
      out.block[0] = k.blockX, out.block[1] = k.blockY, out.block[2] = k.blockZ;
      out.shared_bytes = static_cast<uint32_t>(k.staticSharedMemory + k.dynamicSharedMemory);
      out.registers = k.registersPerThread;
      size_t len = k.name ? strnlen(k.name, TPC_NAME_MAX) : 0;
      out.name_len = static_cast<uint16_t>(len);
      Append(TPC_KERNEL, &out, sizeof(out), k.name, len);
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = *reinterpret_cast<const TPC_MEMCPY_RECORD*>(record);
      tpc_memcpy out{};
      out.a = Activity(m, m.graphId);
      out.bytes = m.bytes;
      out.copy_kind = m.copyKind, out.src_kind = m.srcKind, out.dst_kind = m.dstKind;
      Append(TPC_MEMCPY, &out, sizeof(out));
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = *reinterpret_cast<const TPC_MEMSET_RECORD*>(record);
      tpc_memset out{};
      out.a = Activity(m, m.graphId);
      out.bytes = m.bytes;
      out.value = m.value;
      Append(TPC_MEMSET, &out, sizeof(out));
      return;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto& api = *reinterpret_cast<const CUpti_ActivityAPI*>(record);
      tpc_api out{};
      out.start_ns = api.start;
      out.end_ns = api.end;
      out.correlation = api.correlationId;
      out.cbid = api.cbid;
      out.domain = record->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? TPC_API_RUNTIME : TPC_API_DRIVER;
      out.tid = ThreadTid(api.threadId, api.correlationId);
      Append(TPC_API, &out, sizeof(out));
      return;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto& s = *reinterpret_cast<const TPC_SYNC_RECORD*>(record);
      tpc_sync out{};
      out.start_ns = s.start;
      out.end_ns = s.end;
      out.correlation = s.correlationId;
      out.type = s.type;
      out.context = s.contextId;
      out.stream = s.streamId;
      Append(TPC_SYNC, &out, sizeof(out));
      return;
    }
    default:
      ++g_unknown;
  }
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_send_mutex);
    CUpti_Activity* record = nullptr;
    while (g_cupti.ActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) Forward(record);
    Flush();
  }
  free(buffer);
}

// Every API call: the first one of each thread teaches its tid (ThreadTid).
void CUPTIAPI OnApiCall(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  if (t_seen) return;
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite != CUPTI_API_ENTER) return;
  t_seen = true;
  auto tid = static_cast<uint32_t>(syscall(SYS_gettid));
  std::lock_guard<std::mutex> lock(g_threads_mutex);
  g_first_calls[info->correlationId] = tid;
  // Until that call's record arrives (or if CUPTI lost it): CUPTI's
  // threadId is the pthread id cut to 32 bits on Linux, as far as we know.
  g_thread_tids.try_emplace(static_cast<uint32_t>(pthread_self()), tid);
}

uint64_t MonotonicTimestamp() { return MonotonicNs(); }

// Out before returning (a bounded wait): a note often says the collector
// stops here, and the process may exit right after.
void SendNote(const char* text) {
  tpc_header hdr{};
  std::lock_guard<std::mutex> lock(g_send_mutex);
  Append(TPC_NOTE, &hdr, sizeof(hdr), text, strlen(text));
  Flush();
  WaitForSender(kSendWaitMs);
}

// What was sent and lost since this connection began, as torchprobe gets it:
// every flush period while counts move (a --pid run ends while the target
// lives on), and at exit. Counts are cumulative; torchprobe keeps the last.
uint64_t g_cupti_dropped_base = 0;  // CUPTI's own count when this connection began
tpc_drops g_counts_sent{};          // the last counts queued; under g_send_mutex

size_t CuptiDropped() {
  size_t dropped = 0;
  g_cupti.ActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  return dropped;
}

// Queues the counts if they moved (at exit: always, the records still
// queued counted as lost); `cupti_dropped`: CUPTI's
// count now, asked before g_send_mutex (CUPTI may be waiting on a buffer
// callback that holds it); under g_send_mutex.
void QueueCounts(bool at_exit, size_t cupti_dropped) {
  tpc_drops drops{};
  {
    std::lock_guard<std::mutex> queue_lock(g_queue_mutex);
    size_t unsent = 0;  // still queued (at exit: lost with the process)
    for (const Queued& q : g_queue) unsent += q.records;
    drops.records_sent = g_sent;
    drops.records_dropped = g_dropped + (at_exit ? unsent : 0);
  }
  drops.cupti_dropped =
      cupti_dropped >= g_cupti_dropped_base ? cupti_dropped - g_cupti_dropped_base : cupti_dropped;
  drops.unknown = g_unknown;
  if (!at_exit && drops.records_sent == g_counts_sent.records_sent &&
      drops.records_dropped == g_counts_sent.records_dropped && drops.cupti_dropped == g_counts_sent.cupti_dropped &&
      drops.unknown == g_counts_sent.unknown)
    return;
  g_counts_sent = drops;
  Append(TPC_DROPS, &drops, sizeof(drops));
  Flush();
}

// At exit: what is queued goes out (a bounded wait), then the counts.
void SendDrops() {
  constexpr int kExitWaitMs = 1000;
  size_t cupti_dropped = CuptiDropped();
  std::lock_guard<std::mutex> lock(g_send_mutex);
  Flush();
  WaitForSender(kExitWaitMs);
  QueueCounts(true, cupti_dropped);
  WaitForSender(kSendWaitMs);
}

// A new connection counts from zero.
void ResetCounts() {
  size_t cupti_dropped = CuptiDropped();
  std::lock_guard<std::mutex> lock(g_send_mutex);
  {
    std::lock_guard<std::mutex> queue_lock(g_queue_mutex);
    g_sent = g_dropped = 0;
  }
  g_unknown = 0;
  g_counts_sent = tpc_drops{};
  g_cupti_dropped_base = cupti_dropped;
}

// Torchprobe is gone: no more records, and CUPTI is left to others (a
// torch.profiler the target starts later subscribes). False when another
// torchprobe connected meanwhile (Start): collecting goes on for it.
bool StopCollecting() {
  std::lock_guard<std::mutex> lock(g_start_mutex);
  if (!g_gone.load()) return false;
  for (CUpti_ActivityKind kind : kKinds) g_cupti.ActivityDisable(kind);
  if (g_subscriber) g_cupti.Unsubscribe(g_subscriber);
  g_subscriber = nullptr;
  g_flushing = false;
  return true;
}

// CUPTI hands buffers over when they fill; this makes them flow while the
// target runs. Torchprobe gone: stop asking CUPTI for records.
void FlushLoop() {
  timespec period{0, static_cast<long>(kFlushPeriodNs)};
  while (!g_stopping.load()) {
    nanosleep(&period, nullptr);
    if (g_stopping.load()) break;
    g_cupti.ActivityFlushAll(0);
    if (g_gone.load() && StopCollecting()) return;
    size_t cupti_dropped = CuptiDropped();
    std::lock_guard<std::mutex> lock(g_send_mutex);
    QueueCounts(false, cupti_dropped);
  }
}

void AtExit() {
  // A forked child (a DataLoader worker) inherits this handler, not CUDA:
  // only the process that initialized CUPTI flushes it.
  if (static_cast<uint32_t>(getpid()) != g_pid) return;
  g_stopping = true;
  g_cupti.ActivityFlushAll(1);  // forced: the records still in CUPTI's buffers
  SendDrops();
}

bool Connect(const char* path) {
  g_socket = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (g_socket < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  size_t len = strlen(path);
  if (len == 0 || len >= sizeof(addr.sun_path)) return false;
  memcpy(addr.sun_path, path, len);
  if (path[0] == '@') addr.sun_path[0] = '\0';  // torchprobe's: the abstract namespace
  socklen_t addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  return connect(g_socket, reinterpret_cast<sockaddr*>(&addr), addr_len) == 0;
}

}  // namespace

namespace {

// Subscribes to CUPTI, once per subscription: the clock, the buffers.
int Subscribe(bool notes) {
  auto fail = [notes](int code, const char* note) {
    if (notes) SendNote(note);
    return code;
  };
  CUptiResult result = g_cupti.Subscribe(&g_subscriber, OnApiCall, nullptr);
  if (result != CUPTI_SUCCESS) g_subscriber = nullptr;
  if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    return fail(TPC_ATTACH_BUSY, "another CUPTI subscriber (a profiler) owns this process: no GPU activity, CPU side only");
  if (result != CUPTI_SUCCESS) return fail(TPC_ATTACH_SUBSCRIBE_FAILED, "cuptiSubscribe failed: no GPU activity");
  g_cupti.EnableDomain(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
  g_cupti.EnableDomain(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
  g_hello = tpc_hello{};
  g_hello.version = TPC_VERSION;
  if (g_cupti.ActivityRegisterTimestampCallback &&
      g_cupti.ActivityRegisterTimestampCallback(MonotonicTimestamp) == CUPTI_SUCCESS) {
    g_hello.clock = TPC_CLOCK_MONOTONIC;
  } else {
    uint64_t cupti_now = 0;
    g_cupti.GetTimestamp(&cupti_now);
    g_hello.clock = TPC_CLOCK_CUPTI_OFFSET;
    g_hello.clock_offset_ns = static_cast<int64_t>(MonotonicNs() - cupti_now);
  }
  g_cupti.GetVersion(&g_hello.cupti_version);
  if (g_cupti.ActivityRegisterCallbacks(BufferRequested, BufferCompleted) != CUPTI_SUCCESS) {
    g_cupti.Unsubscribe(g_subscriber);
    g_subscriber = nullptr;
    return fail(TPC_ATTACH_CALLBACKS_FAILED, "cuptiActivityRegisterCallbacks failed: no GPU activity");
  }
  return TPC_ATTACH_OK;
}

// Records are read with the layouts of the CUPTI headers this library was
// built against (the Makefile picks their newest versions). Another CUPTI
// hands out its own newest: newer ones append fields, so this mostly holds,
// but it is said, once per connection. 13.0.x releases share layouts.
void WarnOfAnotherCupti() {
  uint32_t running = g_hello.cupti_version, built = CUPTI_API_VERSION;
  bool same = running == built || (running >= 10000 && built >= 10000 && running / 100 == built / 100);
  if (same) return;
  char text[320];
  std::snprintf(text, sizeof(text),
                "CUPTI API version %u in the process, the collector was built for %u: records are read with %u's "
                "layouts; if kernels look wrong, rebuild it with that toolkit's headers (make CUPTI_INCLUDE=...)",
                running, built, built);
  SendNote(text);
}

// Connects to torchprobe at `socket_path` and makes CUPTI's records flow
// there. Called again in the same process (another torchprobe run injects
// it, dlopen handing back this copy): a new connection, and CUPTI
// subscribed again if the last torchprobe's leaving unsubscribed it.
// `notes`: say why not to torchprobe too (the driver's path, which returns
// nothing that torchprobe sees). Returns enum tpc_attach_status.
int Start(const char* socket_path, bool notes) {
  std::lock_guard<std::mutex> start_lock(g_start_mutex);
  g_pid = static_cast<uint32_t>(getpid());
  {
    std::lock_guard<std::mutex> lock(g_send_mutex);
    if (g_socket >= 0) close(g_socket);
    g_socket = -1;
    if (!socket_path || !Connect(socket_path)) {
      if (g_socket >= 0) close(g_socket);
      g_socket = -1;
      return TPC_ATTACH_NO_SOCKET;  // torchprobe is not listening: nothing to do
    }
    g_datagram.reserve(TPC_MAX_DATAGRAM);
    g_gone = false;
  }
  if (!g_cupti_loaded) g_cupti_loaded = LoadCupti();
  if (!g_cupti_loaded) {
    if (notes) SendNote("no CUPTI library found in the process or by the loader: no GPU activity");
    return TPC_ATTACH_NO_CUPTI;
  }
  if (!g_subscriber) {
    int status = Subscribe(notes);
    if (status != TPC_ATTACH_OK) return status;
  }
  ResetCounts();
  WarnOfAnotherCupti();
  for (CUpti_ActivityKind kind : kKinds) g_cupti.ActivityEnable(kind);
  {
    tpc_hello hello = g_hello;
    std::lock_guard<std::mutex> lock(g_send_mutex);
    Append(TPC_HELLO, &hello, sizeof(hello));
    Flush();
  }
  if (!g_exit_handler) atexit(AtExit);
  g_exit_handler = true;
  if (!g_flushing) std::thread(FlushLoop).detach();
  g_flushing = true;
  return TPC_ATTACH_OK;
}

}  // namespace

// The CUDA driver calls this once, at cuInit, in a process whose
// CUDA_INJECTION64_PATH names this library. Returns 1 (as the driver
// expects) whatever happens: a failure here only means no GPU records.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return 1;
  Start(getenv(TPC_SOCKET_ENV), true);
  return 1;
}

// torchprobe calls this inside a running process it loaded this library
// into (record --inject-cupti, attach/inject_library.h), on a thread it
// borrowed at a CUDA launch's entry; again at each later injection.
extern "C" __attribute__((visibility("default"))) int torchprobe_cupti_attach(const char* socket_path) {
  return Start(socket_path, false);
}
