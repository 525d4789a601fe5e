// The flight recorder; see the header.
#include "userspace/session/flight_recorder.h"

#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "userspace/base/atomic_file.h"
#include "userspace/base/clock.h"
#include "userspace/base/counted.h"
#include "userspace/base/host_name.h"
#include "userspace/base/utc_time.h"
#include "userspace/model/oom_event.h"
#include "userspace/model/step_slicer.h"
#include "userspace/session/window_schedule.h"

namespace torchprobe {
namespace {

constexpr size_t kStepHistory = 32;
constexpr size_t kMaxOpenPerThread = 512;  // deeper: the oldest entries are let go
constexpr size_t kMaxCollectiveSeqs = 1 << 16;
constexpr uint64_t kCoalesceNs = 2'000'000'000;  // stalls this close to a stall dump fold into it
// An out-of-memory error not caught this long after it is raised is dumped as
// it stands (a C++ throw through uretprobe'd frames waits for the keeper).
constexpr uint64_t kOomWaitNs = 1'000'000'000;


// A host name as part of a file name: letters, digits, '.', '-' and '_'.
std::string FileSafe(const std::string& text) {
  std::string safe;
  for (char c : text) safe += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ? c : '_';
  return safe;
}

// How a wait(2) status says a process ended.
std::string HowEnded(uint32_t code) {
  if ((code & 0x7f) == 0) return "exited " + std::to_string((code >> 8) & 0xff);
  int sig = static_cast<int>(code & 0x7f);
  const char* abbrev = sigabbrev_np(sig);
  std::string name = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
  std::string text = "killed by " + name + ((code & 0x80) ? " (core dumped)" : "");
  if (sig == SIGKILL) text += " (kill -9 or the OOM killer)";
  return text;
}

bool IsEntry(uint16_t type) {
  return type == EV_OP_ENTER || type == EV_BOXED_ENTER || type == EV_CUDA_CALL || type == EV_OP_SHAPES ||
         type == EV_COLLECTIVE || type == EV_AUTOGRAD_NODE;
}

uint64_t ThreadKey(uint32_t pid, uint32_t tid) { return (uint64_t{pid} << 32) | tid; }

}  // namespace

FlightRecorder::FlightRecorder(const RecordOptions& options, CaptureWindows* windows, EventRouter* router,
                               OpTable* ops, ProcNames* names)
    : options_(options),
      windows_(windows),
      router_(router),
      ops_(ops),
      names_(names),
      host_(HostName()),
      marker_(options.step_marker.empty() ? kDefaultStepMarker : options.step_marker),
      ring_(options.flight.bytes) {}

void FlightRecorder::Started() const {
  if (options_.quiet) return;
  std::fprintf(stderr, "torchprobe: flight recorder: recording, the last %.3g s kept (%s tier, up to %.0f MB); "
               "SIGUSR2 writes a dump\n", options_.flight.seconds, options_.flight.light ? "light" : "full",
               ring_.capacity() / 1e6);
}

void FlightRecorder::Keep(const void* record, size_t size) {
  if (size < sizeof(tp_event_header)) {  // malformed: the router counts it
    router_->Route(record, size);
    return;
  }
  tp_event_header header;
  std::memcpy(&header, record, sizeof header);
  if (!ring_.Push(record, size, header.ts_ns)) return;
  ++kept_;
  Remember(header);
  TrackOpen(record, size, header);
  if (header.type == EV_OOM && size >= sizeof(tp_oom_event)) {
    tp_oom_event oom;
    std::memcpy(&oom, record, sizeof oom);
    OomFacts facts = DescribeOom(oom);
    // Dumped once the error is caught (its thread's unwind is kept: the
    // allocating op ends there) or kOomWaitNs after it, whichever first.
    if (facts.out_of_memory && !oom_.pid)
      oom_ = {header.pid, header.tid, header.ts_ns, false,
              "pid " + std::to_string(header.pid) + " ran out of memory at " + facts.where};
  } else if (header.type == EV_OP_UNWIND && oom_.pid && header.tid == oom_.tid) {
    oom_.caught = true;
  }
}

void FlightRecorder::Remember(const tp_event_header& header) {
  // Names are read while the process lives: a dump of a dead one still has them.
  if (!seen_threads_.insert(ThreadKey(header.pid, header.tid)).second) return;
  if (!seen_threads_.count(ThreadKey(header.pid, 0))) {
    seen_threads_.insert(ThreadKey(header.pid, 0));
    names_->Process(header.pid);
  }
  names_->Thread(header.pid, header.tid);
}

bool FlightRecorder::IsMarker(uint32_t op_id) {
  if (op_id >= ops_->size()) return false;
  if (marker_ops_.size() < ops_->size()) marker_ops_.resize(ops_->size(), -1);
  if (marker_ops_[op_id] < 0) marker_ops_[op_id] = MatchesStepMarker((*ops_)[op_id].name, marker_) ? 1 : 0;
  return marker_ops_[op_id] == 1;
}

void FlightRecorder::Step(uint32_t pid, uint64_t ts_ns) {
  Steps& steps = steps_[pid];
  if (steps.last_ns && ts_ns > steps.last_ns) {
    steps.intervals.push_back(ts_ns - steps.last_ns);
    if (steps.intervals.size() > kStepHistory) steps.intervals.erase(steps.intervals.begin());
  }
  steps.last_ns = std::max(steps.last_ns, ts_ns);
  ++steps.seen;
  steps.stalled = false;
}

uint64_t FlightRecorder::MedianStep(const Steps& steps) const {
  if (steps.intervals.empty()) return 0;
  std::vector<uint64_t> sorted = steps.intervals;
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  return sorted[sorted.size() / 2];
}

void FlightRecorder::TrackOpen(const void* record, size_t size, const tp_event_header& header) {
  std::vector<Pending>& open = open_[ThreadKey(header.pid, header.tid)];
  if (IsEntry(header.type) && size >= sizeof(tp_op_event)) {
    tp_op_event op;
    std::memcpy(&op, record, sizeof op);
    if (IsMarker(op.op_id)) Step(header.pid, header.ts_ns);
    if (header.type == EV_COLLECTIVE && size >= sizeof(tp_collective_event)) {
      tp_collective_event collective;
      std::memcpy(&collective, record, sizeof collective);
      Group& group = groups_[{header.pid, collective.group}];
      group.rank = collective.rank;
      group.size = collective.group_size;
      group.last_begin_ns = header.ts_ns;
      group.last_op = op.op_id;
      if (collective_seq_.size() >= kMaxCollectiveSeqs) collective_seq_.erase(collective_seq_.begin());
      collective_seq_[{header.pid, header.tid, header.ts_ns}] = ++group.entered;
    }
    if (open.size() >= kMaxOpenPerThread) open.erase(open.begin());
    open.push_back({kept_, op.frame, 0, std::string(static_cast<const char*>(record), size)});
  } else if (header.type == EV_OP_EXIT && size >= sizeof(tp_op_event)) {
    tp_op_event op;
    std::memcpy(&op, record, sizeof op);
    // Callers' frames are above their callees': what is open below the
    // returning call returned unseen; the call itself closes.
    while (!open.empty() && open.back().record == 0 && open.back().frame < op.frame) open.pop_back();
    if (!open.empty() && open.back().record == 0 && open.back().frame == op.frame) open.pop_back();
  } else if (header.type == EV_OP_UNWIND && size >= sizeof(tp_op_event)) {
    tp_op_event op;
    std::memcpy(&op, record, sizeof op);
    while (!open.empty() && open.back().record == 0 && open.back().frame <= op.frame) open.pop_back();
  } else if (header.type == EV_ANNOT_BEGIN && size >= sizeof(tp_annot_event)) {
    tp_annot_event range;
    std::memcpy(&range, record, sizeof range);
    size_t length = std::min<size_t>(range.name_len, size - sizeof(tp_annot_event));
    std::string_view name(static_cast<const char*>(record) + sizeof(tp_annot_event), length);
    if (!(range.name_flags & ANNOT_NAME_UNSEEN) && MatchesStepMarker(name, marker_)) Step(header.pid, header.ts_ns);
    if (range.name_flags & ANNOT_NAME_MARK) return;  // a boundary (light tier): nothing stays open
    if (open.size() >= kMaxOpenPerThread) open.erase(open.begin());
    open.push_back({kept_, 0, range.record, std::string(static_cast<const char*>(record), size)});
  } else if (header.type == EV_ANNOT_END && size >= sizeof(tp_annot_event)) {
    tp_annot_event range;
    std::memcpy(&range, record, sizeof range);
    std::vector<Pending>& began = range.begin_tid && range.begin_tid != header.tid
                                      ? open_[ThreadKey(header.pid, range.begin_tid)] : open;
    for (size_t i = began.size(); i-- > 0;)
      if (began[i].record == range.record) {
        began.erase(began.begin() + static_cast<long>(i));
        break;
      }
  }
}

void FlightRecorder::Exited(const tp_proc_event& exit) {
  uint64_t key = ThreadKey(exit.hdr.pid, exit.hdr.tid);
  open_.erase(key);
  seen_threads_.erase(key);  // its name stays with ProcNames
  if (!exit.is_leader) return;
  std::string how = HowEnded(exit.exit_code);
  ended_[exit.hdr.pid] = how;
  for (auto it = open_.begin(); it != open_.end();)  // its other threads are gone with it
    it = (it->first >> 32) == exit.hdr.pid ? open_.erase(it) : std::next(it);
  if ((exit.exit_code & 0x7f) != 0)
    Dump("signal", "pid " + std::to_string(exit.hdr.pid) + " " + how, exit.hdr.pid, NowNs());
}

void FlightRecorder::Poll(uint64_t now_ns, int dump_requests) {
  uint64_t span = static_cast<uint64_t>(options_.flight.seconds * 1e9);
  if (now_ns > span) ring_.DropBefore(now_ns - span);
  if (oom_.pid && (oom_.caught || now_ns > oom_.ts_ns + kOomWaitNs)) {
    PendingOom oom = oom_;
    oom_ = {};
    Dump("oom", oom.detail, oom.pid, now_ns);
  }
  if (dump_requests != requests_seen_) {
    requests_seen_ = dump_requests;
    Dump("request", "asked for (SIGUSR2)", 0, now_ns);
  }
  std::vector<uint32_t> stalled;
  std::string detail;
  for (auto& [pid, steps] : steps_) {
    if (steps.stalled || steps.seen < 2 || ended_.count(pid)) continue;
    uint64_t median = MedianStep(steps);
    uint64_t after = std::max<uint64_t>(static_cast<uint64_t>(options_.flight.stall_factor * median),
                                        static_cast<uint64_t>(options_.flight.stall_after_s * 1e9));
    if (now_ns <= steps.last_ns + after) continue;
    steps.stalled = true;  // one dump per stall: the next step re-arms it
    stalled.push_back(pid);
    char line[200];
    std::snprintf(line, sizeof line, "%spid %u: no step boundary (%s) for %.1f s; median step %.3f s, a stall after %.1f s",
                  detail.empty() ? "" : "; ", pid, marker_.c_str(), (now_ns - steps.last_ns) / 1e9, median / 1e9,
                  after / 1e9);
    detail += line;
  }
  if (stalled.empty()) return;
  // Ranks of one job stall together: one dump holds every traced process,
  // so stalls found shortly after a stall dump are told, not dumped again.
  if (last_stall_dump_ns_ && now_ns - last_stall_dump_ns_ < kCoalesceNs && !dumps_.empty()) {
    std::fprintf(stderr, "torchprobe: flight recorder: %s; the stall dump %s taken %.1f s ago shows it\n",
                 detail.c_str(), dumps_.back().c_str(), (now_ns - last_stall_dump_ns_) / 1e9);
    return;
  }
  last_stall_dump_ns_ = now_ns;
  Dump("stall", detail, stalled.front(), now_ns);
}

void FlightRecorder::Dump(const std::string& reason, const std::string& detail, uint32_t pid, uint64_t now_ns) {
  uint64_t unix_ns = NowNs(CLOCK_REALTIME);
  if (pid == 0 && !steps_.empty()) pid = steps_.begin()->first;
  if (pid == 0 && !options_.pids.empty()) pid = options_.pids.front();
  std::string suffix = FileSafe(host_);
  if (pid) {
    suffix += "-" + std::to_string(pid);
    ProcessInfo process = names_->Process(pid);
    if (process.rank >= 0) suffix += "-rank" + std::to_string(process.rank);
  }
  suffix += "-" + reason + "-" + UtcTime(unix_ns, true);
  RecordOptions dump = options_;
  for (std::string* path : {&dump.output, &dump.et_output, &dump.chrome_output})
    if (!path->empty()) *path = NumberedPath(*path, suffix);
  // Entries still open that the ring no longer holds come first, in order.
  uint64_t last_dropped = kept_ - ring_.records();  // records are numbered from 1 as kept
  std::vector<const Pending*> older;
  for (const auto& [thread, open] : open_)
    for (const Pending& pending : open)
      if (pending.seq <= last_dropped) older.push_back(&pending);
  std::sort(older.begin(), older.end(), [](const Pending* a, const Pending* b) { return a->seq < b->seq; });
  uint64_t from_ns = ring_.oldest_ns() ? ring_.oldest_ns() : now_ns;
  for (const Pending* pending : older) {
    tp_event_header header;
    std::memcpy(&header, pending->bytes.data(), sizeof header);
    from_ns = std::min<uint64_t>(from_ns, header.ts_ns);
  }
  StallReport report;
  Status status = windows_->WriteDump(
      dump, from_ns, now_ns,
      [&] {
        for (const Pending* pending : older) router_->Route(pending->bytes.data(), pending->bytes.size());
        ring_.ForEach([&](const void* record, size_t size) { router_->Route(record, size); });
      },
      [&](const OpStackModel& model) { report = Report(model, reason, detail, from_ns, now_ns, pid); });
  std::string primary = !dump.output.empty() ? dump.output : !dump.chrome_output.empty() ? dump.chrome_output : dump.et_output;
  std::string base = primary.size() > 8 && primary.compare(primary.size() - 8, 8, ".pftrace") == 0
                         ? primary.substr(0, primary.size() - 8) : primary;  // the stall reports' name
  std::string error;
  if (status.ok()) {
    report.trace = primary;
    report.dump_unix_ns = unix_ns;
    for (const auto& [path, text] : {std::pair{base + ".stall.txt", StallReportText(report)},
                                     std::pair{base + ".stall.json", StallReportJson(report)}}) {
      std::unique_ptr<AtomicFile> file = AtomicFile::Open(path, &error);
      if (!file || !file->Write(text.data(), text.size()) || !file->Commit(&error)) {
        if (file && error.empty()) error = file->error();
        break;
      }
    }
  } else {
    error = status.message();
  }
  if (!error.empty()) {
    ++failed_dumps_;
    std::fprintf(stderr, "torchprobe: flight recorder: the %s dump could not be written: %s\n", reason.c_str(),
                 error.c_str());
    return;
  }
  dumps_.push_back(primary);
  std::fprintf(stderr, "torchprobe: flight recorder: %s dump written: %s (%s; the last %.1f s, %" PRIu64
               " events), stall report %s.stall.txt\n", reason.c_str(), primary.c_str(), detail.c_str(),
               (now_ns - from_ns) / 1e9, ring_.records(), base.c_str());
}

StallReport FlightRecorder::Report(const OpStackModel& model, const std::string& reason, const std::string& detail,
                                   uint64_t from_ns, uint64_t now_ns, uint32_t pid) {
  StallReport report;
  report.host = host_;
  report.reason = reason;
  report.detail = detail;
  report.dump_ns = now_ns;
  report.from_ns = from_ns;
  report.ring_records = ring_.records();
  report.ring_bytes = ring_.used_bytes();
  report.dropped_for_room = ring_.dropped_for_room();
  auto steps = steps_.find(pid);
  if (steps != steps_.end()) {
    report.steps_seen = steps->second.seen;
    report.last_step_ns = steps->second.last_ns;
    report.median_step_ns = MedianStep(steps->second);
  }
  std::map<uint32_t, StallProcess> processes;
  auto process_of = [&](uint32_t p) -> StallProcess& {
    StallProcess& process = processes[p];
    if (process.pid == 0) {
      ProcessInfo info = names_->Process(p);
      process.pid = p;
      process.rank = info.rank;
      process.name = info.name;
      auto ended = ended_.find(p);
      if (ended != ended_.end()) process.ended = ended->second;
    }
    return process;
  };
  for (const OpStackModel::OpenThread& open : model.OpenThreads()) {
    StallThread thread;
    thread.tid = open.tid;
    thread.name = names_->Thread(open.pid, open.tid);
    thread.last_closed_end_ns = open.last_closed_end;
    if (thread_now_ && !ended_.count(open.pid)) thread_now_(open.pid, open.tid, now_ns, thread.now);
    for (const Slice& slice : open.open) {
      StallSlice stall;
      const OpInfo* op = slice.op_id < ops_->size() ? &(*ops_)[slice.op_id] : nullptr;
      stall.name = op ? op->name : "op " + std::to_string(slice.op_id);
      stall.category = op ? op->category : "";
      stall.begin_ns = slice.begin_ns;
      if (slice.args)
        for (const SliceArg& arg : *slice.args)
          stall.args.push_back({arg.name, arg.is_text ? arg.text : std::to_string(arg.number)});
      auto seq = collective_seq_.find({open.pid, open.tid, slice.begin_ns});
      if (seq != collective_seq_.end()) stall.collective_seq = seq->second;
      thread.open.push_back(std::move(stall));
    }
    process_of(open.pid).threads.push_back(std::move(thread));
  }
  for (const auto& [key, group] : groups_) {
    char address[24];
    std::snprintf(address, sizeof address, "0x%" PRIx64, key.second);
    StallCollectives entry;
    entry.group = address;
    entry.rank = group.rank;
    entry.group_size = group.size;
    entry.entered = group.entered;
    entry.last_begin_ns = group.last_begin_ns;
    entry.last_op = group.last_op < ops_->size() ? (*ops_)[group.last_op].name : "";
    process_of(key.first).groups.push_back(entry);
  }
  for (auto& [p, process] : processes) report.processes.push_back(std::move(process));
  return report;
}

std::string FlightRecorder::Describe() const {
  char ring[160];
  std::snprintf(ring, sizeof ring, "the ring held %" PRIu64 " events in %.1f MB of %.1f MB (%" PRIu64
                " dropped for room)", ring_.records(), ring_.used_bytes() / 1e6, ring_.capacity() / 1e6,
                ring_.dropped_for_room());
  std::string text = std::to_string(dumps_.size()) + (dumps_.size() == 1 ? " flight recorder dump" : " flight recorder dumps");
  for (size_t i = 0; i < dumps_.size(); ++i) text += (i ? ", " : ": ") + dumps_[i];
  if (failed_dumps_) text += " (" + std::to_string(failed_dumps_) + " could not be written)";
  if (ring_.too_large()) text += "; " + Counted(ring_.too_large(), "event", "events") + " larger than the ring, not kept";
  return text + "; " + ring;
}

}  // namespace torchprobe
