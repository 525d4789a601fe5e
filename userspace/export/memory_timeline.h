// --memory-timeline FILE.json|FILE.html: the memory events as PyTorch's
// memory profiler gives them (torch.profiler._memory_profiler's
// MemoryProfile.timeline, every device's), from outside the process: CPU
// allocations and the device caching allocators' blocks.
//
// FILE.json: one JSON array of rows [time_ns, action, [id, version], bytes],
// sorted by (time, action) as PyTorch sorts them. Actions are PyTorch's
// Action values: 1 PREEXISTING (time -1: memory allocated before tracing
// began whose free was seen), 2 CREATE, 3 INCREMENT_VERSION (an in-place
// write, at the writing op's start: only with the memory categories, i.e.
// --shapes too), 4 DESTROY. time_ns is CLOCK_MONOTONIC (the trace's clock).
// Ids are unique in the file, across processes; version is the
// allocation's version before the row (0 without categories). Bytes: as
// allocated; a pre-existing allocation's, glibc's usable size (0 when its
// chunk header could not be read).
// FILE.html: a self-contained page (no script, no network) with a stacked
// plot of memory over time by category (with --shapes, as
// export_memory_timeline draws it), else by allocating op, as an inline SVG.
#ifndef TORCHPROBE_EXPORT_MEMORY_TIMELINE_H
#define TORCHPROBE_EXPORT_MEMORY_TIMELINE_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "userspace/base/atomic_file.h"
#include "userspace/base/op_table.h"
#include "userspace/model/memory_categories.h"
#include "userspace/model/memory_sink.h"

namespace torchprobe {

enum class TimelineAction : uint8_t { kPreexisting = 1, kCreate = 2, kIncrementVersion = 3, kDestroy = 4 };

struct TimelineRow {
  int64_t t_ns = 0;  // -1 for kPreexisting
  TimelineAction action = TimelineAction::kCreate;
  uint64_t id = 0;
  uint64_t bytes = 0;
  uint32_t op_id = kNoOp;  // the op that allocated it (kNoOp: none, or before the trace)
  uint32_t version = 0;
};

class MemoryTimeline : public MemorySink, public MemoryCategorySink {
 public:
  // `ops` names the op ids (it may grow while recording). Creates the
  // output's temp file now; nullptr and a one-line *error for a name that
  // ends neither in .json nor .html, or a file that cannot be written.
  static std::unique_ptr<MemoryTimeline> Open(const std::string& path, const OpTable* ops, std::string* error);
  void AddMemoryEvent(const MemoryEvent& event) override;
  // A window's categories (several windows: each adds its own).
  void AddMemoryCategories(const MemoryCategoryResult& result) override;
  // Writes the file (atomically); false with a one-line *error.
  bool Finish(std::string* error);

  // Rows sorted as PyTorch sorts its timeline, with versions.
  std::vector<TimelineRow> SortedRows() const;
  // The same rows, each in its category's band (op_id = the category), an
  // in-place write that changes the category as a move between bands.
  std::vector<TimelineRow> CategoryRows(const std::vector<TimelineRow>& rows) const;

 private:
  MemoryTimeline(std::unique_ptr<AtomicFile> file, const OpTable* ops, bool html)
      : file_(std::move(file)), ops_(ops), html_(html) {}
  std::unique_ptr<AtomicFile> file_;
  const OpTable* ops_;
  bool html_;
  std::vector<TimelineRow> rows_;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> ids_;  // (pid, model id) -> row id, while alive
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> row_of_;  // (pid, model id) -> row id, ever
  std::map<uint64_t, std::vector<MemoryCategory>> categories_;  // row id -> category by version
  std::vector<TimelineRow> bumps_;  // INCREMENT_VERSION rows
  bool categorized_ = false;
  uint64_t next_id_ = 1;
};

// The rows as PyTorch's JSON rows.
std::string TimelineJson(const std::vector<TimelineRow>& rows);

}  // namespace torchprobe

#endif  // TORCHPROBE_EXPORT_MEMORY_TIMELINE_H
