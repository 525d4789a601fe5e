// Op time by Python line, and folded stacks; see the header.
#include "userspace/report/python_lines.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "userspace/model/python_frames.h"
#include "userspace/model/step_slicer.h"
#include "userspace/report/op_summary.h"
#include "userspace/report/text_format.h"

namespace torchprobe {
namespace {

constexpr const char* kNoFrame = "(no Python frame)";

// "FILE(FIRST): QUALNAME" as its file and function.
std::pair<std::string_view, std::string_view> SplitFrame(std::string_view name) {
  size_t close = name.find("): ");
  size_t open = close == std::string_view::npos ? close : name.rfind('(', close);
  if (open == std::string_view::npos) return {"", name};
  return {name.substr(0, open), name.substr(close + 3)};
}

std::string LineText(std::string_view frame_name, int32_t line) {
  auto [file, function] = SplitFrame(frame_name);
  return std::string(file) + ":" + (line >= 0 ? std::to_string(line) : "?") + " " + std::string(function);
}

bool IsFrame(const DecodedTrace& trace, const DecodedSlice& slice) {
  return trace.ops[slice.op].category == kPythonFunction;
}

bool IsOp(const DecodedTrace& trace, const DecodedSlice& slice) { return trace.ops[slice.op].category.empty(); }

// A Python frame's slices are not time of their own: an op's self time is
// its time less its children's, whatever encloses it. What the line
// tables and folded stacks count for one op slice, walking up from it:
// the innermost frame and the line there (the nearest "python line" below
// that frame on the way up).
struct OpPlace {
  int32_t frame = -1;  // slice index of the innermost enclosing frame
  int32_t line = -1;
};

OpPlace PlaceOf(const DecodedTrace& trace, const DecodedThread& thread, size_t index) {
  OpPlace place;
  for (int32_t i = static_cast<int32_t>(index); i >= 0; i = thread.slices[i].parent) {
    const DecodedSlice& slice = thread.slices[i];
    if (IsFrame(trace, slice)) {
      place.frame = i;
      return place;
    }
    if (place.line < 0 && slice.python_line >= 0) place.line = slice.python_line;
  }
  return place;
}

}  // namespace

std::vector<LineTime> TimeByLine(const DecodedTrace& trace) {
  std::map<std::string, LineTime> lines;
  for (const DecodedThread& thread : trace.threads) {
    std::vector<uint64_t> self = SelfTimes(thread);
    for (size_t i = 0; i < thread.slices.size(); ++i) {
      if (!IsOp(trace, thread.slices[i])) continue;
      OpPlace place = PlaceOf(trace, thread, i);
      std::string key = place.frame < 0 ? kNoFrame
                                        : LineText(trace.ops[thread.slices[place.frame].op].name, place.line);
      LineTime& row = lines[key];
      row.line = key;
      row.self_ns += self[i];
      ++row.ops;
    }
  }
  std::vector<LineTime> rows;
  for (auto& [key, row] : lines) rows.push_back(std::move(row));
  std::stable_sort(rows.begin(), rows.end(), [](const LineTime& a, const LineTime& b) { return a.self_ns > b.self_ns; });
  return rows;
}

void PrintByLine(const DecodedTrace& trace, size_t top, std::ostream& out) {
  std::vector<LineTime> rows = TimeByLine(trace);
  uint64_t total = 0, ops = 0;
  for (const LineTime& row : rows) {
    total += row.self_ns;
    ops += row.ops;
  }
  out << "Op time by Python line (each op's self time under the innermost Python line it was called from):\n";
  out << PadLeft("Self time", 12) << PadLeft("%", 9) << PadLeft("Ops", 10) << "  Line\n";
  for (size_t i = 0; i < rows.size() && i < top; ++i)
    out << PadLeft(FormatTime(rows[i].self_ns), 12) << PadLeft(FormatShare(rows[i].self_ns, total), 9)
        << PadLeft(std::to_string(rows[i].ops), 10) << "  " << OneLine(rows[i].line, 200) << "\n";
  if (rows.size() > top) out << "  ... " << rows.size() - top << " more lines\n";
  out << PadLeft(FormatTime(total), 12) << PadLeft(FormatShare(total, total), 9) << PadLeft(std::to_string(ops), 10)
      << "  total: every op's self time\n";
}

void WriteFolded(const DecodedTrace& trace, std::ostream& out) {
  std::map<std::string, uint64_t> stacks;
  std::vector<std::string> path;
  for (const DecodedThread& thread : trace.threads) {
    std::vector<uint64_t> self = SelfTimes(thread);
    for (size_t i = 0; i < thread.slices.size(); ++i) {
      if (!IsOp(trace, thread.slices[i])) continue;
      path.clear();
      int32_t line = -1;  // the line the walk up is at in the frame it meets next
      for (int32_t j = static_cast<int32_t>(i); j >= 0; j = thread.slices[j].parent) {
        const DecodedSlice& slice = thread.slices[j];
        const std::string& name = trace.ops[slice.op].name;
        if (IsFrame(trace, slice)) {
          auto [file, function] = SplitFrame(name);
          path.push_back(std::string(function) + " (" + std::string(file) + ":" +
                         (line >= 0 ? std::to_string(line) : "?") + ")");
          line = slice.caller_line;
          continue;
        }
        if (line < 0 && slice.python_line >= 0) line = slice.python_line;
        if (name.rfind(kStepPrefix, 0) == 0) continue;  // steps would split every stack by step number
        path.push_back(name);
      }
      std::string folded;
      for (size_t k = path.size(); k-- > 0;) {
        std::string part = path[k];
        std::replace(part.begin(), part.end(), ';', ':');  // the format's separator
        std::replace(part.begin(), part.end(), '\n', ' ');
        folded += part;
        if (k) folded += ';';
      }
      stacks[folded] += self[i];
    }
  }
  for (const auto& [folded, ns] : stacks) out << folded << " " << ns << "\n";
}

}  // namespace torchprobe
