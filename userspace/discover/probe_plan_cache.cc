#include "userspace/discover/probe_plan_cache.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "userspace/export/atomic_file.h"

namespace torchprobe {
namespace {

// Bump with any change of what is written below. The size check makes a new
// OpProbe field fail to build here until it is written and read too.
constexpr uint32_t kFormat = 2;  // 2: node_object_offset
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

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace

std::string PlanCachePath(const std::string& elf_path) {
  const char* dir = std::getenv(kPlanCacheEnv);
  struct stat st;
  if (!dir || !*dir || stat(elf_path.c_str(), &st) != 0) return "";
  char name[160];
  std::snprintf(name, sizeof name, "/opplan-v%u-%llx-%llx-%llx-%llx.%09ld.bin", kFormat,
                (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, (unsigned long long)st.st_size,
                (unsigned long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  return dir + std::string(name);
}

bool LoadProbePlan(const std::string& cache_path, OpProbeSet* set) {
  std::ifstream file(cache_path, std::ios::binary);
  if (!file) return false;
  std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  Reader in(data);
  uint64_t format = 0, count = 0;
  if (!in.U64(&format) || format != kFormat || !in.Int(&set->unresolved) || !in.Int(&set->without_returns) ||
      !in.Int(&set->boxed) || !in.Int(&set->unobserved) || !in.U64(&count) || count > data.size())
    return false;
  set->probes.clear();
  set->probes.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    OpProbe p{};
    uint64_t returns = 0, resolved = 0, tail = 0, boxed = 0;
    if (!in.Int(&p.file_offset) || !in.U64(&returns) || returns > data.size()) return false;
    p.return_offsets.resize(returns);
    for (uint64_t& offset : p.return_offsets)
      if (!in.U64(&offset)) return false;
    if (!in.Str(&p.symbol) || !in.Str(&p.op.name) || !in.Str(&p.op.overload) || !in.Str(&p.op.schema) ||
        !in.Str(&p.op.category) || !in.U64(&resolved) || !in.U64(&tail) || !in.U64(&boxed) ||
        !in.Int(&p.handle_offset) || !in.Int(&p.collective_layout) || !in.Int(&p.group_rank_offset) ||
        !in.Int(&p.tensor_numel_offset) || !in.Int(&p.node_object_offset))
      return false;
    p.resolved = resolved;
    p.tail_returns = tail;
    p.boxed = boxed;
    set->probes.push_back(std::move(p));
  }
  return in.done();
}

void StoreProbePlan(const std::string& cache_path, const OpProbeSet& set) {
  Writer out;
  out.U64(kFormat);
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
  for (size_t slash = dir.find('/', 1); ; slash = dir.find('/', slash + 1)) {  // mkdir -p
    mkdir(dir.substr(0, slash).c_str(), 0700);
    if (slash == std::string::npos) break;
  }
  std::string error;
  std::unique_ptr<AtomicFile> file = AtomicFile::Open(cache_path, &error);
  if (!file) return;
  file->Write(out.out().data(), out.out().size());
  file->Commit(&error);
}

}  // namespace torchprobe
