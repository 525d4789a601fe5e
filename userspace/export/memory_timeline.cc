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
  if (e.device_type != 0 || e.segment) return;  // the CPU's timeline, as export_memory_timeline gives one device's
  auto key = std::make_pair(e.pid, e.id);
  int64_t t = static_cast<int64_t>(e.ts_ns);
  switch (e.kind) {
    case MemoryEvent::kAlloc:
      ids_[key] = next_id_;
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

std::vector<TimelineRow> MemoryTimeline::SortedRows() const {
  std::vector<TimelineRow> rows = rows_;
  std::stable_sort(rows.begin(), rows.end(), [](const TimelineRow& a, const TimelineRow& b) {
    return a.t_ns != b.t_ns ? a.t_ns < b.t_ns : a.action < b.action;
  });
  return rows;
}

std::string TimelineJson(const std::vector<TimelineRow>& rows) {
  std::string out = "[";
  char buf[96];
  for (size_t i = 0; i < rows.size(); ++i) {
    const TimelineRow& r = rows[i];
    snprintf(buf, sizeof(buf), "%s[%" PRId64 ", %u, [%" PRIu64 ", 0], %" PRIu64 "]", i ? ", " : "", r.t_ns,
             static_cast<unsigned>(r.action), r.id, r.bytes);
    out += buf;
  }
  out += "]\n";
  return out;
}

bool MemoryTimeline::Finish(std::string* error) {
  std::vector<TimelineRow> rows = SortedRows();
  std::string text;
  if (html_) {
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
