// Stacked-area SVG of the timeline rows; see the header.
#include "userspace/export/timeline_html.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_set>

namespace torchprobe {
namespace {

constexpr size_t kBands = 8;         // ops drawn on their own; the rest are "other ops"
constexpr size_t kMaxPoints = 2000;  // samples along the time axis
constexpr int kWidth = 1280, kHeight = 560, kLeft = 90, kRight = 340, kTop = 50, kBottom = 60;
constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                   "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string Number(double v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

struct Sample {
  double t_ms = 0;
  std::vector<double> bytes;  // per band
};

}  // namespace

std::string TimelineHtml(const std::vector<TimelineRow>& rows, const std::vector<std::string>& op_names) {
  // Bands: memory from before the trace, the ops with the highest peaks,
  // then everything else.
  std::map<uint32_t, int64_t> live, peak;
  int64_t preexisting = 0;
  std::unordered_set<uint64_t> before_ids;  // PREEXISTING rows come first (time -1)
  for (const TimelineRow& r : rows) {
    if (r.action == TimelineAction::kPreexisting) {
      preexisting += static_cast<int64_t>(r.bytes);
      before_ids.insert(r.id);
    }
    if (before_ids.count(r.id)) continue;
    if (r.action == TimelineAction::kCreate) live[r.op_id] += static_cast<int64_t>(r.bytes);
    else if (r.action == TimelineAction::kDestroy) live[r.op_id] -= static_cast<int64_t>(r.bytes);
    peak[r.op_id] = std::max(peak[r.op_id], live[r.op_id]);
  }
  std::vector<std::pair<int64_t, uint32_t>> by_peak;
  for (const auto& [op, p] : peak) by_peak.push_back({-p, op});
  std::sort(by_peak.begin(), by_peak.end());
  std::map<uint32_t, size_t> band_of;  // op -> band; others: the "other ops" band
  std::vector<std::string> labels = {"allocated before the trace"};
  for (size_t i = 0; i < by_peak.size() && i < kBands; ++i) {
    uint32_t op = by_peak[i].second;
    band_of[op] = labels.size();
    labels.push_back(op == kNoOp ? "(outside any op)" : op < op_names.size() ? op_names[op] : "op " + std::to_string(op));
  }
  size_t other = labels.size();
  labels.push_back("other ops");

  // Replay: one sample per time, at most kMaxPoints of them (the last state
  // in each stretch of time).
  std::vector<double> state(labels.size(), 0);
  state[0] = static_cast<double>(preexisting);
  int64_t first = -1, last = 0;
  for (const TimelineRow& r : rows)
    if (r.t_ns >= 0) {
      if (first < 0) first = r.t_ns;
      last = r.t_ns;
    }
  double span = first < 0 ? 1 : std::max<double>(1, static_cast<double>(last - first));
  std::vector<Sample> samples;
  samples.push_back({0, state});
  double peak_total = static_cast<double>(preexisting);
  for (size_t i = 0; i < rows.size(); ++i) {
    const TimelineRow& r = rows[i];
    if (r.t_ns < 0) continue;
    size_t band = before_ids.count(r.id) ? 0 : band_of.count(r.op_id) ? band_of[r.op_id] : other;
    double sign = r.action == TimelineAction::kCreate ? 1 : r.action == TimelineAction::kDestroy ? -1 : 0;
    state[band] = std::max(0.0, state[band] + sign * static_cast<double>(r.bytes));
    double total = 0;
    for (double b : state) total += b;
    peak_total = std::max(peak_total, total);
    double t_ms = static_cast<double>(r.t_ns - first) / 1e6;
    bool same_bucket = !samples.empty() &&
                       static_cast<size_t>((t_ms * 1e6 / span) * kMaxPoints) ==
                           static_cast<size_t>((samples.back().t_ms * 1e6 / span) * kMaxPoints);
    if (same_bucket && samples.size() > 1) samples.back() = {t_ms, state};
    else samples.push_back({t_ms, state});
  }
  double max_ms = std::max(1e-3, span / 1e6);
  double max_bytes = std::max(1.0, peak_total);
  int plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto x = [&](double ms) { return kLeft + ms / max_ms * plot_w; };
  auto y = [&](double bytes) { return kTop + plot_h - bytes / max_bytes * plot_h; };

  std::string svg;
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(kWidth) + "\" height=\"" +
         std::to_string(kHeight) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  // Bands bottom-up: each between the running sums below and with it.
  for (size_t band = 0; band < labels.size(); ++band) {
    // Steps, not slopes: memory changes at an event and holds till the next.
    std::string upper, lower;
    auto point = [&](double t_ms, const std::vector<double>& bytes) {
      double below = 0;
      for (size_t k = 0; k < band; ++k) below += bytes[k];
      upper += Number(x(t_ms)) + "," + Number(y(below + bytes[band])) + " ";
      lower = Number(x(t_ms)) + "," + Number(y(below)) + " " + lower;
    };
    for (size_t i = 0; i < samples.size(); ++i) {
      if (i > 0) point(samples[i].t_ms, samples[i - 1].bytes);
      point(samples[i].t_ms, samples[i].bytes);
    }
    svg += "<polygon fill=\"" + std::string(kColors[band % std::size(kColors)]) + "\" fill-opacity=\"0.8\" points=\"" +
           upper + lower + "\"/>\n";
  }
  // Axes, ticks, labels, legend.
  svg += "<line x1=\"" + std::to_string(kLeft) + "\" y1=\"" + std::to_string(kTop + plot_h) + "\" x2=\"" +
         std::to_string(kLeft + plot_w) + "\" y2=\"" + std::to_string(kTop + plot_h) + "\" stroke=\"black\"/>\n";
  svg += "<line x1=\"" + std::to_string(kLeft) + "\" y1=\"" + std::to_string(kTop) + "\" x2=\"" + std::to_string(kLeft) +
         "\" y2=\"" + std::to_string(kTop + plot_h) + "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 5; ++i) {
    double ms = max_ms * i / 5, mib = max_bytes * i / 5 / (1 << 20);
    svg += "<text x=\"" + Number(x(ms)) + "\" y=\"" + std::to_string(kTop + plot_h + 18) +
           "\" text-anchor=\"middle\">" + Number(ms) + "</text>\n";
    char label[32];
    snprintf(label, sizeof(label), "%.2f", mib);
    svg += "<text x=\"" + std::to_string(kLeft - 6) + "\" y=\"" + Number(y(max_bytes * i / 5) + 4) +
           "\" text-anchor=\"end\">" + label + "</text>\n";
  }
  svg += "<text x=\"" + std::to_string(kLeft + plot_w / 2) + "\" y=\"" + std::to_string(kHeight - 15) +
         "\" text-anchor=\"middle\">Time (ms)</text>\n";
  svg += "<text x=\"20\" y=\"" + std::to_string(kTop + plot_h / 2) + "\" transform=\"rotate(-90 20 " +
         std::to_string(kTop + plot_h / 2) + ")\" text-anchor=\"middle\">Memory (MiB)</text>\n";
  char title[160];
  snprintf(title, sizeof(title), "CPU memory by allocating op (torchprobe): peak %.2f MiB",
           peak_total / (1 << 20));
  svg += "<text x=\"" + std::to_string(kLeft) + "\" y=\"30\" font-size=\"16\">" + std::string(title) + "</text>\n";
  for (size_t band = 0; band < labels.size(); ++band) {
    int ly = kTop + 10 + static_cast<int>(band) * 20;
    int lx = kLeft + plot_w + 20;
    svg += "<rect x=\"" + std::to_string(lx) + "\" y=\"" + std::to_string(ly - 10) + "\" width=\"12\" height=\"12\" fill=\"" +
           kColors[band % std::size(kColors)] + "\"/>\n";
    svg += "<text x=\"" + std::to_string(lx + 18) + "\" y=\"" + std::to_string(ly) + "\">" + Escape(labels[band]) +
           "</text>\n";
  }
  svg += "</svg>\n";
  return "<!DOCTYPE html>\n<html>\n<head><meta charset=\"utf-8\"><title>CPU memory timeline</title></head>\n"
         "<body style=\"margin:0\">\n" + svg + "</body>\n</html>\n";
}

}  // namespace torchprobe
