#include "userspace/discover/probe_plan_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "userspace/base/atomic_file.h"
#include "userspace/discover/elf_symbols.h"

namespace torchprobe {
namespace {

// Bump with any change of what is written below. The size check makes a new
// OpProbe field fail to build here until it is written and read too.
constexpr uint32_t kFormat = 3;  // 2: node_object_offset; 3: build-id and probe-site hash
static_assert(sizeof(OpProbe) == 216, "OpProbe changed: store and load the new field, then bump kFormat");

class Writer {
 public:
  void U64(uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void Str(const std::string& s) {
    U64(s.size());
    out_.append(s);
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  bool U64(uint64_t* v) {
    if (in_.size() - pos_ < sizeof *v) return false;
    std::memcpy(v, in_.data() + pos_, sizeof *v);
    pos_ += sizeof *v;
    return true;
  }
  template <class T>
  bool Int(T* v) {
    uint64_t wide;
    if (!U64(&wide)) return false;
    *v = static_cast<T>(wide);
    return true;
  }
  bool Str(std::string* s) {
    uint64_t size;
    if (!U64(&size) || in_.size() - pos_ < size) return false;
    s->assign(in_.data() + pos_, size);
    pos_ += size;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }
  size_t size() const { return in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

// FNV-1a over each probe site's offset and first 8 bytes (entry and returns):
// whether the image still holds, at every place the plan would put a
// breakpoint, the bytes that were there when it was planned.
uint64_t ProbeSiteHash(const ElfImage& image, const OpProbeSet& set) {
  uint64_t hash = 0xcbf29ce484222325ull;
  auto mix = [&](const void* data, size_t size) {
    for (size_t i = 0; i < size; ++i) {
      hash ^= static_cast<const uint8_t*>(data)[i];
      hash *= 0x100000001b3ull;
    }
  };
  auto site = [&](uint64_t offset) {
    std::string_view bytes = image.FileBytes(offset, 8);
    mix(&offset, sizeof offset);
    uint64_t size = bytes.size();
    mix(&size, sizeof size);
    mix(bytes.data(), bytes.size());
  };
  for (const OpProbe& p : set.probes) {
    site(p.file_offset);
    for (uint64_t offset : p.return_offsets) site(offset);
  }
  return hash;
}

// "" when `dir` is a folder of ours that no one else can write; else why not.
std::string WhyNotOurs(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a folder";
  if (st.st_uid != geteuid() || (st.st_mode & 022)) {
    char why[128];
    std::snprintf(why, sizeof why, "owned by uid %u, mode %04o (it must be ours, writable by no one else)",
                  static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_mode & 07777));
    return why;
  }
  return "";
}

void MakeDirs(const std::string& dir) {  // mkdir -p, 0700
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    mkdir(dir.substr(0, slash).c_str(), 0700);
    if (slash == std::string::npos) break;
  }
}

}  // namespace

bool PreparePlanCacheDir(const std::string& dir, std::string* error) {
  MakeDirs(dir);
  std::string why = WhyNotOurs(dir);
  if (why.empty()) return true;
  *error = "plan cache " + dir + " refused: " + why;
  return false;
}

std::string PlanCacheFolder() {
  const char* env = std::getenv(kPlanCacheEnv);
  if (!env || !*env) return "";
  std::string dir = env;
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {  // absent: StoreProbePlan makes it, ours
    static bool said = false;
    std::string why = WhyNotOurs(dir);
    if (!why.empty()) {
      if (!said) std::fprintf(stderr, "torchprobe: plan cache %s refused: %s; planning without it\n", dir.c_str(), why.c_str());
      said = true;
      return "";
    }
  }
  return dir;
}

std::string PlanCachePath(const std::string& elf_path) {
  std::string dir = PlanCacheFolder();
  if (dir.empty()) return "";
  struct stat st;
  if (stat(elf_path.c_str(), &st) != 0) return "";
  char name[192];
  std::snprintf(name, sizeof name, "/opplan-v%u-%llx-%llx-%llx-%llx.%09ld-%llx.%09ld.bin", kFormat,
                (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, (unsigned long long)st.st_size,
                (unsigned long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (unsigned long long)st.st_ctim.tv_sec,
                st.st_ctim.tv_nsec);
  return dir + name;
}

CachedPlan LoadProbePlan(const std::string& cache_path, const ElfImage& image, OpProbeSet* set) {
  // Only a regular file of ours, read without waiting on anything else.
  int fd = open(cache_path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return CachedPlan::kNone;
  struct stat st;
  std::string data;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_size < (1ll << 30)) {
    data.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < data.size()) {
      ssize_t n = read(fd, data.data() + got, data.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    data.resize(got);
  }
  close(fd);
  Reader in(data);
  uint64_t format = 0, count = 0, hash = 0;
  std::string build_id;
  if (!in.U64(&format) || format != kFormat || !in.Str(&build_id) || !in.U64(&hash) ||
      !in.Int(&set->unresolved) || !in.Int(&set->without_returns) || !in.Int(&set->boxed) ||
      !in.Int(&set->unobserved) || !in.U64(&count) || count > data.size())
    return CachedPlan::kNone;
  set->probes.clear();
  set->probes.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    OpProbe p{};
    uint64_t returns = 0, resolved = 0, tail = 0, boxed = 0;
    if (!in.Int(&p.file_offset) || !in.U64(&returns) || returns > data.size()) return CachedPlan::kNone;
    p.return_offsets.resize(returns);
    for (uint64_t& offset : p.return_offsets)
      if (!in.U64(&offset)) return CachedPlan::kNone;
    if (!in.Str(&p.symbol) || !in.Str(&p.op.name) || !in.Str(&p.op.overload) || !in.Str(&p.op.schema) ||
        !in.Str(&p.op.category) || !in.U64(&resolved) || !in.U64(&tail) || !in.U64(&boxed) ||
        !in.Int(&p.handle_offset) || !in.Int(&p.collective_layout) || !in.Int(&p.group_rank_offset) ||
        !in.Int(&p.tensor_numel_offset) || !in.Int(&p.node_object_offset))
      return CachedPlan::kNone;
    p.resolved = resolved;
    p.tail_returns = tail;
    p.boxed = boxed;
    set->probes.push_back(std::move(p));
  }
  if (!in.done()) return CachedPlan::kNone;
  if (build_id != image.BuildId() || hash != ProbeSiteHash(image, *set)) return CachedPlan::kMismatch;
  return CachedPlan::kLoaded;
}

void StoreProbePlan(const std::string& cache_path, const ElfImage& image, const OpProbeSet& set) {
  Writer out;
  out.U64(kFormat);
  out.Str(std::string(image.BuildId()));
  out.U64(ProbeSiteHash(image, set));
  out.U64(set.unresolved);
  out.U64(set.without_returns);
  out.U64(set.boxed);
  out.U64(set.unobserved);
  out.U64(set.probes.size());
  for (const OpProbe& p : set.probes) {
    out.U64(p.file_offset);
    out.U64(p.return_offsets.size());
    for (uint64_t offset : p.return_offsets) out.U64(offset);
    out.Str(p.symbol);
    out.Str(p.op.name);
    out.Str(p.op.overload);
    out.Str(p.op.schema);
    out.Str(p.op.category);
    out.U64(p.resolved);
    out.U64(p.tail_returns);
    out.U64(p.boxed);
    out.U64(p.handle_offset);
    out.U64(p.collective_layout);
    out.U64(p.group_rank_offset);
    out.U64(p.tensor_numel_offset);
    out.U64(p.node_object_offset);
  }
  std::string dir = cache_path.substr(0, cache_path.rfind('/'));
  MakeDirs(dir);
  if (!WhyNotOurs(dir).empty()) return;
  std::string error;
  std::unique_ptr<AtomicFile> file = AtomicFile::Open(cache_path, &error);
  if (!file) return;
  file->Write(out.out().data(), out.out().size());
  file->Commit(&error);
}

std::optional<OpProbeSet> CachedProbePlan(const std::string& cache_path, const ElfImage& image,
                                          const std::string& elf_path) {
  if (cache_path.empty()) return std::nullopt;
  OpProbeSet cached;
  CachedPlan found = LoadProbePlan(cache_path, image, &cached);
  if (found == CachedPlan::kLoaded && image.Intact().ok()) {
    cached.image_path = elf_path;
    return cached;
  }
  if (found == CachedPlan::kMismatch) {
    std::fprintf(stderr, "torchprobe: %s: %s does not match %s (build-id or the bytes at its probe sites): planned again\n",
                 kPlanCacheRejected, cache_path.c_str(), elf_path.c_str());
    unlink(cache_path.c_str());
  }
  return std::nullopt;
}

}  // namespace torchprobe
