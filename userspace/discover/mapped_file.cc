// A read-only mapping that survives its file being cut short; see the header.
#include "userspace/discover/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace torchprobe {
namespace {

// The mappings the handler may patch. Lock-free: the handler runs in
// whichever thread faulted, possibly while another registers a mapping.
struct GuardedRange {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0};  // 0: none (set last, cleared first)
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> cut{false};
};
constexpr int kSlots = 256;
GuardedRange g_ranges[kSlots];
struct sigaction g_previous;
uintptr_t g_page = 4096;
std::once_flag g_installed;

void OnSigbus(int signal, siginfo_t* info, void* context) {
  uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardedRange& range : g_ranges) {
    uintptr_t begin = range.begin.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= range.end.load(std::memory_order_acquire)) continue;
    int saved = errno;
    void* page = reinterpret_cast<void*>(address & ~(g_page - 1));
    void* zeros = mmap(page, g_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    errno = saved;
    if (zeros == MAP_FAILED) break;  // no memory for a page: die as without us
    range.cut.store(true, std::memory_order_release);
    return;  // the read is retried and sees zeros
  }
  if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction) {
    g_previous.sa_sigaction(signal, info, context);
  } else if (!(g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_handler != SIG_DFL &&
             g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signal);
  } else {
    // The fault repeats on return and ends the process as it would have.
    struct sigaction fallback = {};
    fallback.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &fallback, nullptr);
  }
}

void InstallHandler() {
  long page = sysconf(_SC_PAGESIZE);
  if (page > 0) g_page = static_cast<uintptr_t>(page);
  struct sigaction action = {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &g_previous);
}

int Register(uintptr_t begin, uintptr_t end) {
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_ranges[i].used.compare_exchange_strong(expected, true)) continue;
    g_ranges[i].cut.store(false);
    g_ranges[i].end.store(end, std::memory_order_release);
    g_ranges[i].begin.store(begin, std::memory_order_release);
    return i;
  }
  return -1;
}

void Unregister(int slot) {
  g_ranges[slot].begin.store(0, std::memory_order_release);
  g_ranges[slot].end.store(0, std::memory_order_release);
  g_ranges[slot].used.store(false);
}

}  // namespace

StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  std::call_once(g_installed, InstallHandler);
  // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of
  // waiting for a writer; a regular file ignores the flag.
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::Error("cannot read " + path + ": not a regular file");
  }
  if (st.st_size <= 0) {
    close(fd);
    return Status::Error("cannot read " + path + ": empty");
  }
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->size_ = static_cast<uint64_t>(st.st_size);
  void* map = mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (map == MAP_FAILED) return Status::Error("cannot map " + path + ": " + std::strerror(err));
  file->data_ = static_cast<char*>(map);
  uintptr_t begin = reinterpret_cast<uintptr_t>(map);
  file->slot_ = Register(begin, begin + ((file->size_ + g_page - 1) & ~(g_page - 1)));
  if (file->slot_ < 0) return Status::Error("cannot read " + path + ": too many files mapped at once");
  return file;
}

MappedFile::~MappedFile() {
  if (slot_ >= 0) Unregister(slot_);
  if (data_ != nullptr) munmap(data_, size_);
}

bool MappedFile::cut_short() const { return slot_ >= 0 && g_ranges[slot_].cut.load(std::memory_order_acquire); }

}  // namespace torchprobe
