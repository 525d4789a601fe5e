#include "userspace/report/op_table_printer.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "userspace/report/text_format.h"

namespace torchprobe {
namespace {

constexpr size_t kMaxNameWidth = 55;  // torch's max_name_column_width
constexpr size_t kMaxShapesWidth = 80;  // torch's max_shapes_column_width
constexpr size_t kColumnWidth = 12;
constexpr const char* kSpacing = "  ";
constexpr const char* kHeaders[] = {"Self CPU %", "Self CPU",     "CPU total %",
                                    "CPU total",  "CPU time avg", "# of Calls"};

}  // namespace

void PrintOpTable(const std::vector<OpSummary>& rows, size_t top, std::ostream& out) {
  uint64_t self_total = 0;
  for (const OpSummary& r : rows) self_total += r.self_ns;
  const size_t shown = std::min(top, rows.size());

  size_t name_width = 4;
  for (size_t i = 0; i < shown; ++i) name_width = std::max(name_width, rows[i].name.size() + 4);
  name_width = std::min(name_width, kMaxNameWidth);
  // Grouped by input shape (report --group-by-input-shape): torch's last column.
  size_t shapes_width = 0;
  for (size_t i = 0; i < shown; ++i)
    if (!rows[i].input_shapes.empty()) {
      size_t commas = std::count(rows[i].input_shapes.begin(), rows[i].input_shapes.end(), ',');
      shapes_width = std::max(shapes_width, rows[i].input_shapes.size() + commas + 4);
    }
  shapes_width = std::min(shapes_width, kMaxShapesWidth);
  if (shapes_width) shapes_width = std::max<size_t>(shapes_width, 16);

  std::string rule = std::string(name_width, '-') + kSpacing;
  for (size_t i = 0; i < std::size(kHeaders); ++i)
    rule += std::string(kColumnWidth, '-') + kSpacing;
  if (shapes_width) rule += std::string(shapes_width, '-') + kSpacing;
  out << rule << "\n";
  out << PadLeft("Name", name_width) << kSpacing;
  for (const char* h : kHeaders) out << PadLeft(h, kColumnWidth) << kSpacing;
  if (shapes_width) out << PadLeft("Input Shapes", shapes_width) << kSpacing;
  out << "\n" << rule << "\n";
  for (size_t i = 0; i < shown; ++i) {
    const OpSummary& r = rows[i];
    std::string name = r.name;
    if (name.size() >= kMaxNameWidth - 3) name = name.substr(0, kMaxNameWidth - 3) + "...";
    out << PadLeft(name, name_width) << kSpacing
        << PadLeft(FormatShare(r.self_ns, self_total), kColumnWidth) << kSpacing
        << PadLeft(FormatTime(r.self_ns), kColumnWidth) << kSpacing
        << PadLeft(FormatShare(r.total_ns, self_total), kColumnWidth) << kSpacing
        << PadLeft(FormatTime(r.total_ns), kColumnWidth) << kSpacing
        << PadLeft(FormatTime(r.calls ? r.total_ns / r.calls : 0), kColumnWidth) << kSpacing
        << PadLeft(std::to_string(r.calls), kColumnWidth) << kSpacing;
    if (shapes_width) {
      std::string shapes;  // as torch prints the list: "[[2, 3], []]"
      for (char c : r.input_shapes) shapes += c == ',' ? std::string(", ") : std::string(1, c);
      if (shapes.size() >= kMaxShapesWidth - 3) shapes = shapes.substr(0, kMaxShapesWidth - 3) + "...";
      out << PadLeft(shapes, shapes_width) << kSpacing;
    }
    out << "\n";
  }
  out << rule << "\n";
  if (shown < rows.size()) {
    // Ops below the cut may still add up to much of the time: say how much.
    uint64_t hidden_self = 0;
    for (size_t i = shown; i < rows.size(); ++i) hidden_self += rows[i].self_ns;
    out << "... " << rows.size() - shown << " more op" << (rows.size() - shown == 1 ? "" : "s")
        << " not shown (" << FormatShare(hidden_self, self_total)
        << " of self time): --top N shows more\n";
  }
  out << "Self CPU time total: " << FormatTime(self_total) << "\n";
}

}  // namespace torchprobe
