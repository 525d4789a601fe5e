// Timeline rows from memory events; see the header.
#include "userspace/export/memory_timeline.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "userspace/base/atomic_file.h"
#include "userspace/export/timeline_html.h"

namespace torchprobe {

std::unique_ptr<MemoryTimeline> MemoryTimeline::Open(const std::string& path, const OpTable* ops,
                                                     std::string* error) {
  auto ends_with = [&path](const char* suffix) {
    std::string s(suffix);
    return path.size() > s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  bool html = ends_with(".html");
  if (!html && !ends_with(".json")) {
    *error = "--memory-timeline " + path + ": the name must end in .json or .html";
    return nullptr;
  }
  std::unique_ptr<AtomicFile> file = AtomicFile::Open(path, error);
  if (!file) return nullptr;
  return std::unique_ptr<MemoryTimeline>(new MemoryTimeline(std::move(file), ops, html));
}

void MemoryTimeline::AddMemoryEvent(const MemoryEvent& e) {
  if (e.segment) return;  // the caching allocator's blocks are its memory, not the segments they are cut from
  auto key = std::make_pair(e.pid, e.id);
  int64_t t = static_cast<int64_t>(e.ts_ns);
  switch (e.kind) {
    case MemoryEvent::kAlloc:
      ids_[key] = next_id_;
      row_of_[key] = next_id_;
      rows_.push_back({t, TimelineAction::kCreate, next_id_++, e.bytes, e.op_id});
      break;
    case MemoryEvent::kFree: {
      auto it = ids_.find(key);
      if (it == ids_.end()) return;  // cannot be: the model paired it
      rows_.push_back({t, TimelineAction::kDestroy, it->second, e.bytes, e.alloc_op_id});
      ids_.erase(it);
      break;
    }
    case MemoryEvent::kPreexistingFree:
      rows_.push_back({-1, TimelineAction::kPreexisting, next_id_, e.bytes, kNoOp});
      rows_.push_back({t, TimelineAction::kDestroy, next_id_++, e.bytes, kNoOp});
      break;
  }
}

void MemoryTimeline::AddMemoryCategories(const MemoryCategoryResult& result) {
  categorized_ = true;
  // Chunk by chunk (memory_categories.h): what a chunk does not know stays.
  for (const auto& [key, versions] : result.categories) {
    auto row = row_of_.find(key);
    if (row == row_of_.end()) continue;
    std::vector<MemoryCategory>& known = categories_[row->second];
    if (known.size() < versions.size()) known.resize(versions.size(), MemoryCategory::kUnknown);
    for (size_t v = 0; v < versions.size(); ++v)
      if (versions[v] != MemoryCategory::kUnknown) known[v] = versions[v];
  }
  for (const MemoryCategoryResult::Bump& b : result.bumps)
    if (auto row = row_of_.find(b.key); row != row_of_.end())
      bumps_.push_back({static_cast<int64_t>(b.ts_ns), TimelineAction::kIncrementVersion, row->second, b.bytes, kNoOp,
                        b.from});
}

std::vector<TimelineRow> MemoryTimeline::SortedRows() const {
  std::vector<TimelineRow> rows = rows_;
  rows.insert(rows.end(), bumps_.begin(), bumps_.end());
  std::stable_sort(rows.begin(), rows.end(), [](const TimelineRow& a, const TimelineRow& b) {
    return a.t_ns != b.t_ns ? a.t_ns < b.t_ns : a.action < b.action;
  });
  // A free is of the allocation's last version.
  std::map<uint64_t, uint32_t> version;
  for (TimelineRow& r : rows) {
    if (r.action == TimelineAction::kIncrementVersion) version[r.id] = r.version + 1;
    else if (r.action == TimelineAction::kDestroy) r.version = version[r.id];
  }
  return rows;
}

std::vector<TimelineRow> MemoryTimeline::CategoryRows(const std::vector<TimelineRow>& rows) const {
  auto category = [this](uint64_t id, uint32_t version) {
    auto it = categories_.find(id);
    if (it == categories_.end() || it->second.empty()) return static_cast<uint32_t>(MemoryCategory::kUnknown);
    return static_cast<uint32_t>(it->second[std::min<size_t>(version, it->second.size() - 1)]);
  };
  std::vector<TimelineRow> out;
  for (TimelineRow r : rows) {
    if (r.action != TimelineAction::kIncrementVersion) {
      r.op_id = category(r.id, r.version);
      out.push_back(r);
      continue;
    }
    uint32_t before = category(r.id, r.version), after = category(r.id, r.version + 1);
    if (before == after) continue;
    out.push_back({r.t_ns, TimelineAction::kDestroy, r.id, r.bytes, before, r.version});
    out.push_back({r.t_ns, TimelineAction::kCreate, r.id, r.bytes, after, r.version + 1});
  }
  return out;
}

std::string TimelineJson(const std::vector<TimelineRow>& rows) {
  std::string out = "[";
  char buf[96];
  for (size_t i = 0; i < rows.size(); ++i) {
    const TimelineRow& r = rows[i];
    snprintf(buf, sizeof(buf), "%s[%" PRId64 ", %u, [%" PRIu64 ", %u], %" PRIu64 "]", i ? ", " : "", r.t_ns,
             static_cast<unsigned>(r.action), r.id, r.version, r.bytes);
    out += buf;
  }
  out += "]\n";
  return out;
}

bool MemoryTimeline::Finish(std::string* error) {
  std::vector<TimelineRow> rows = SortedRows();
  std::string text;
  if (html_ && categorized_) {
    std::vector<std::string> names;
    for (int c = 0; c < kMemoryCategories; ++c) names.push_back(MemoryCategoryName(static_cast<MemoryCategory>(c)));
    text = TimelineHtml(CategoryRows(rows), names);
  } else if (html_) {
    std::vector<std::string> names;
    for (const OpInfo& op : *ops_) names.push_back(op.name);
    text = TimelineHtml(rows, names);
  } else {
    text = TimelineJson(rows);
  }
  file_->Write(text.data(), text.size());
  return file_->Commit(error);
}

}  // namespace torchprobe
