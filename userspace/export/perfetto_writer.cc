#include "userspace/export/perfetto_writer.h"

#include <time.h>
#include <zlib.h>

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "userspace/base/clock.h"
#include "userspace/export/json_inputs.h"

namespace torchprobe {
namespace {

// Field numbers, upstream's (schemas/perfetto_trace.proto names them).
enum : uint32_t {
  kTracePacket = 1,  // Trace.packet
  // TracePacket
  kClockSnapshot = 6,
  kTimestamp = 8,
  kTrustedSequenceId = 10,
  kTrackEvent = 11,
  kInternedData = 12,
  kSequenceFlags = 13,
  kCompressedPackets = 50,
  kTimestampClockId = 58,
  kTracePacketDefaults = 59,
  kTrackDescriptor = 60,
  kFirstPacketOnSequence = 87,
  // TracePacketDefaults / TrackEventDefaults
  kDefaultsTimestampClockId = 58,
  kDefaultsTrackEventDefaults = 11,
  kTrackEventDefaultsTrackUuid = 11,
  // ClockSnapshot / Clock
  kClocks = 1,
  kPrimaryTraceClock = 2,
  kClockId = 1,
  kClockTimestamp = 2,
  kClockIsIncremental = 3,
  // TrackDescriptor
  kTrackUuid = 1,
  kTrackName = 2,
  kTrackProcess = 3,
  kTrackThread = 4,
  kTrackParentUuid = 5,
  kTrackDescription = 14,
  // ProcessDescriptor / ThreadDescriptor
  kPid = 1,
  kCmdline = 2,
  kProcessName = 6,
  kTid = 2,
  kThreadName = 5,
  // TrackEvent
  kEventCategoryIids = 3,
  kEventDebugAnnotations = 4,
  kEventType = 9,
  kEventNameIid = 10,
  kEventTrackUuid = 11,
  kEventCategories = 22,
  kEventName = 23,
  kEventFlowIds = 47,
  // DebugAnnotation
  kAnnotationNameIid = 1,
  kAnnotationBool = 2,
  kAnnotationUint = 3,
  kAnnotationString = 6,
  kAnnotationName = 10,
  kAnnotationDictEntries = 11,
  kAnnotationStringIid = 17,
  // InternedData and its entries ({iid = 1, name/str = 2})
  kInternedCategories = 1,
  kInternedEventNames = 2,
  kInternedAnnotationNames = 3,
  kInternedAnnotationStrings = 29,
  kIid = 1,
  kInternedName = 2,
};

enum : uint32_t {
  kSeqIncrementalStateCleared = 1,
  kTypeSliceBegin = 1,
  kTypeSliceEnd = 2,
  kTypeInstant = 3,
  kClockRealtime = 1,
  kClockMonotonic = 3,
  kClockBoottime = 6,
  // Sequence-scoped (64..127): each thread sequence's own, incremental.
  kClockIncremental = 64,
};

// Interned per thread sequence, defined in its first packet.
constexpr uint64_t kCategoryAtenIid = 1;
constexpr uint64_t kNameOverloadIid = 1;
constexpr uint64_t kNameSchemaIid = 2;
constexpr uint64_t kNameRepairedBeginIid = 3;
constexpr uint64_t kNameRepairedEndIid = 4;
constexpr uint64_t kNameUnwoundIid = 5;

constexpr size_t kFlushBytes = 256 << 10;
// Compressing, packets are deflated in chunks this big: the bigger, the
// better the ratio (the same few op packets repeat).
constexpr size_t kCompressChunkBytes = 1 << 20;


uint64_t ThreadKey(uint32_t pid, uint32_t tid) { return (uint64_t{pid} << 32) | tid; }

}  // namespace

std::string CleanUtf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    auto c = static_cast<unsigned char>(in[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool valid = n > 0 && c != 0 && i + n <= in.size();
    for (size_t k = 1; valid && k < n; ++k) {
      valid = (static_cast<unsigned char>(in[i + k]) & 0xC0) == 0x80;
    }
    if (valid) {
      out.append(in.substr(i, n));
      i += n;
    } else {
      out.push_back('?');
      ++i;
    }
  }
  return out;
}

std::unique_ptr<PerfettoWriter> PerfettoWriter::Open(const std::string& path, std::string* error,
                                                     Options options) {
  std::unique_ptr<AtomicFile> file = AtomicFile::Open(path, error);
  if (!file) return nullptr;
  return std::unique_ptr<PerfettoWriter>(new PerfettoWriter(std::move(file), options));
}

PerfettoWriter::PerfettoWriter(std::unique_ptr<AtomicFile> file, Options options)
    : file_(std::move(file)), options_(options) {
  encoder_.Reserve((options.compress ? kCompressChunkBytes : kFlushBytes) + 4096);
}

PerfettoWriter::~PerfettoWriter() = default;  // file_ aborts unless committed

void PerfettoWriter::AddOps(const OpTable& ops) {
  for (size_t i = ops_.size(); i < ops.size(); ++i)
    ops_.push_back({CleanUtf8(ops[i].name), CleanUtf8(ops[i].overload), CleanUtf8(ops[i].schema),
                    CleanUtf8(ops[i].category)});
}

void PerfettoWriter::Begin(const OpTable& ops, const ClockSnapshot& clock) {
  ops_.clear();
  AddOps(ops);
  clock_ = clock;
  begun_ = true;
  max_ts_ = clock.monotonic_ns;

  // The clocks, read back to back by the model, so trace_processor can put
  // our MONOTONIC timestamps on its BOOTTIME axis (and REALTIME: `merge`
  // lines up hosts by it).
  size_t packet = encoder_.BeginNested(kTracePacket);
  encoder_.Varint(kTimestamp, clock.boottime_ns);
  encoder_.Varint(kTrustedSequenceId, kGlobalSequenceId);
  encoder_.Varint(kSequenceFlags, kSeqIncrementalStateCleared);
  encoder_.Bool(kFirstPacketOnSequence, true);
  WriteClocks(clock);
  encoder_.EndNested(packet);

  // The global track that carries the stats instant.
  packet = encoder_.BeginNested(kTracePacket);
  encoder_.Varint(kTrustedSequenceId, kGlobalSequenceId);
  size_t track = encoder_.BeginNested(kTrackDescriptor);
  encoder_.Varint(kTrackUuid, kStatsTrackUuid);
  encoder_.String(kTrackName, kStatsEventName);
  encoder_.String(kTrackDescription,
                  "What torchprobe counted but could not show: dropped events, "
                  "repaired slices, unresolved symbols, attach mode and cost.");
  encoder_.EndNested(track);
  encoder_.EndNested(packet);
}

void PerfettoWriter::AddProcess(const ProcessInfo& process) {
  if (processes_.count(process.pid)) return;  // a track is described once
  processes_[process.pid] = true;
  size_t packet = encoder_.BeginNested(kTracePacket);
  encoder_.Varint(kTrustedSequenceId, kGlobalSequenceId);
  size_t track = encoder_.BeginNested(kTrackDescriptor);
  encoder_.Varint(kTrackUuid, ProcessUuid(process.pid));
  size_t desc = encoder_.BeginNested(kTrackProcess);
  encoder_.Varint(kPid, process.pid);
  // `cmdline` is repeated, one entry per argument: trace_processor shows
  // nothing for one string that holds them all.
  for (size_t start = 0; start < process.cmdline.size();) {
    size_t end = process.cmdline.find(' ', start);
    if (end == std::string::npos) end = process.cmdline.size();
    if (end > start) encoder_.String(kCmdline, CleanUtf8(std::string_view(process.cmdline).substr(start, end - start)));
    start = end + 1;
  }
  if (!process.name.empty()) encoder_.String(kProcessName, CleanUtf8(process.name));
  encoder_.EndNested(desc);
  encoder_.EndNested(track);
  encoder_.EndNested(packet);
  MaybeFlush();
}

void PerfettoWriter::AddThread(const ThreadInfo& thread) {
  uint64_t key = ThreadKey(thread.pid, thread.tid);
  if (threads_.count(key)) return;  // a track is described once
  ThreadState& state = threads_[key];
  state.pid = thread.pid;
  state.tid = thread.tid;
  state.sequence_id = next_sequence_id_++;
  state.iids.assign(ops_.size(), {});
  state.last_ts = clock_.monotonic_ns;  // the incremental clock's start
  uint64_t uuid = ThreadUuid(thread.pid, thread.tid);

  size_t packet = encoder_.BeginNested(kTracePacket);
  encoder_.Varint(kTrustedSequenceId, kGlobalSequenceId);
  size_t track = encoder_.BeginNested(kTrackDescriptor);
  encoder_.Varint(kTrackUuid, uuid);
  if (processes_.count(thread.pid)) encoder_.Varint(kTrackParentUuid, ProcessUuid(thread.pid));
  size_t desc = encoder_.BeginNested(kTrackThread);
  encoder_.Varint(kPid, thread.pid);
  encoder_.Varint(kTid, thread.tid);
  if (!thread.name.empty()) encoder_.String(kThreadName, CleanUtf8(thread.name));
  encoder_.EndNested(desc);
  encoder_.EndNested(track);
  encoder_.EndNested(packet);

  // The thread's sequence starts: clear state, set defaults, intern the
  // strings every slice uses.
  packet = encoder_.BeginNested(kTracePacket);
  encoder_.Varint(kTrustedSequenceId, state.sequence_id);
  encoder_.Varint(kSequenceFlags, kSeqIncrementalStateCleared);
  encoder_.Bool(kFirstPacketOnSequence, true);
  size_t defaults = encoder_.BeginNested(kTracePacketDefaults);
  encoder_.Varint(kDefaultsTimestampClockId, kClockIncremental);
  size_t event_defaults = encoder_.BeginNested(kDefaultsTrackEventDefaults);
  encoder_.Varint(kTrackEventDefaultsTrackUuid, uuid);
  encoder_.EndNested(event_defaults);
  encoder_.EndNested(defaults);
  size_t interned = encoder_.BeginNested(kInternedData);
  auto entry = [this](uint32_t field, uint64_t iid, std::string_view name) {
    size_t e = encoder_.BeginNested(field);
    encoder_.Varint(kIid, iid);
    encoder_.String(kInternedName, name);
    encoder_.EndNested(e);
  };
  entry(kInternedCategories, kCategoryAtenIid, "aten");
  entry(kInternedAnnotationNames, kNameOverloadIid, "overload");
  entry(kInternedAnnotationNames, kNameSchemaIid, "schema");
  entry(kInternedAnnotationNames, kNameRepairedBeginIid, "repaired_begin");
  entry(kInternedAnnotationNames, kNameRepairedEndIid, "repaired_end");
  entry(kInternedAnnotationNames, kNameUnwoundIid, "unwound");
  encoder_.EndNested(interned);
  encoder_.EndNested(packet);

  // Its incremental clock, in a packet of its own: trace_processor reads
  // nothing else of a packet that holds a clock snapshot.
  packet = encoder_.BeginNested(kTracePacket);
  encoder_.Varint(kTrustedSequenceId, state.sequence_id);
  size_t snapshot = encoder_.BeginNested(kClockSnapshot);
  size_t incremental = encoder_.BeginNested(kClocks);
  encoder_.Varint(kClockId, kClockIncremental);
  encoder_.Varint(kClockTimestamp, state.last_ts);
  encoder_.Bool(kClockIsIncremental, true);
  encoder_.EndNested(incremental);
  size_t monotonic = encoder_.BeginNested(kClocks);
  encoder_.Varint(kClockId, kClockMonotonic);
  encoder_.Varint(kClockTimestamp, state.last_ts);
  encoder_.EndNested(monotonic);
  encoder_.EndNested(snapshot);
  encoder_.EndNested(packet);
  MaybeFlush();
}

PerfettoWriter::ThreadState& PerfettoWriter::Thread(uint32_t pid, uint32_t tid) {
  auto it = threads_.find(ThreadKey(pid, tid));
  if (it != threads_.end()) return it->second;
  AddThread(ThreadInfo{pid, tid, ""});  // the model should have said; still be correct
  return threads_[ThreadKey(pid, tid)];
}

const OpInfo& PerfettoWriter::Op(uint32_t op_id) {
  while (op_id >= ops_.size()) {
    ops_.push_back({"[unknown op " + std::to_string(ops_.size()) + "]", "", ""});
  }
  return ops_[op_id];
}

// Packets of a thread sequence carry no SEQ_NEEDS_INCREMENTAL_STATE (see the
// header) and their timestamp as a delta on the sequence's incremental clock.
void PerfettoWriter::WriteBegin(ThreadState& thread, const Slice& slice, uint64_t ts) {
  const OpInfo& op = Op(slice.op_id);
  uint32_t id = slice.op_id;
  size_t packet = encoder_.BeginNested(kTracePacket);
  encoder_.Varint(kTimestamp, ts - thread.last_ts);
  encoder_.Varint(kTrustedSequenceId, thread.sequence_id);
  if (id >= thread.iids.size()) thread.iids.resize(ops_.size());
  ThreadState::OpIids& iids = thread.iids[id];
  if (!iids.name) {
    iids.name = thread.next_name_iid++;
    size_t interned = encoder_.BeginNested(kInternedData);
    size_t e = encoder_.BeginNested(kInternedEventNames);
    encoder_.Varint(kIid, iids.name);
    encoder_.String(kInternedName, op.name);
    encoder_.EndNested(e);
    if (!op.overload.empty()) {
      iids.overload = thread.next_string_iid++;
      e = encoder_.BeginNested(kInternedAnnotationStrings);
      encoder_.Varint(kIid, iids.overload);
      encoder_.String(kInternedName, op.overload);
      encoder_.EndNested(e);
    }
    if (!op.schema.empty()) {
      iids.schema = thread.next_string_iid++;
      e = encoder_.BeginNested(kInternedAnnotationStrings);
      encoder_.Varint(kIid, iids.schema);
      encoder_.String(kInternedName, op.schema);
      encoder_.EndNested(e);
    }
    encoder_.EndNested(interned);
  }
  size_t event = encoder_.BeginNested(kTrackEvent);
  encoder_.Varint(kEventType, kTypeSliceBegin);
  // Ops are "aten" (interned); annotations, far fewer, name theirs inline.
  if (op.category.empty()) encoder_.Varint(kEventCategoryIids, kCategoryAtenIid);
  else encoder_.String(kEventCategories, op.category);
  encoder_.Varint(kEventNameIid, iids.name);
  auto annotation = [this](uint64_t name_iid, uint32_t value_field, uint64_t value) {
    size_t a = encoder_.BeginNested(kEventDebugAnnotations);
    encoder_.Varint(kAnnotationNameIid, name_iid);
    encoder_.Varint(value_field, value);
    encoder_.EndNested(a);
  };
  if (iids.overload) annotation(kNameOverloadIid, kAnnotationStringIid, iids.overload);
  if (iids.schema) annotation(kNameSchemaIid, kAnnotationStringIid, iids.schema);
  if (slice.flags & kSliceBeginUnseen) annotation(kNameRepairedBeginIid, kAnnotationBool, 1);
  if (slice.flags & kSliceEndUnseen) annotation(kNameRepairedEndIid, kAnnotationBool, 1);
  if (slice.flags & kSliceUnwound) annotation(kNameUnwoundIid, kAnnotationBool, 1);
  // --shapes: as the Chrome JSON's args, JSON text (named inline).
  if (slice.inputs) {
    for (const auto& [name, text] : {std::pair{"Input Dims", InputDimsJson(*slice.inputs)},
                                     std::pair{"Input type", InputTypesJson(*slice.inputs)}}) {
      size_t a = encoder_.BeginNested(kEventDebugAnnotations);
      encoder_.String(kAnnotationName, name);
      encoder_.String(kAnnotationString, text);
      encoder_.EndNested(a);
    }
  }
  // Per-call arguments are rare and varied: named inline, not interned.
  if (slice.args) {
    for (const SliceArg& arg : *slice.args) {
      size_t a = encoder_.BeginNested(kEventDebugAnnotations);
      encoder_.String(kAnnotationName, arg.name);
      if (arg.is_text) encoder_.String(kAnnotationString, arg.text);
      else encoder_.Varint(kAnnotationUint, arg.number);
      encoder_.EndNested(a);
      // A launch of GPU work: the flow to it begins here (perfetto_gpu.cc).
      if (!arg.is_text && arg.name == kCorrelationArg) encoder_.Fixed64(kEventFlowIds, FlowId(arg.number));
    }
  }
  encoder_.EndNested(event);
  encoder_.EndNested(packet);
  thread.last_ts = ts;
}

void PerfettoWriter::WriteEnd(ThreadState& thread, uint64_t ts) {
  size_t packet = encoder_.BeginNested(kTracePacket);
  encoder_.Varint(kTimestamp, ts - thread.last_ts);
  encoder_.Varint(kTrustedSequenceId, thread.sequence_id);
  size_t event = encoder_.BeginNested(kTrackEvent);
  encoder_.Varint(kEventType, kTypeSliceEnd);
  encoder_.EndNested(event);
  encoder_.EndNested(packet);
  thread.last_ts = ts;
  ++slices_written_;
}

// Pre-order with depth becomes BEGIN/END pairs: a slice's END is due when the
// next slice is not deeper. Timestamps are clamped so that a child stays
// inside its parent and a track never goes back in time: trace_processor
// truncates anything else and counts it as data loss.
void PerfettoWriter::AddSliceTree(uint32_t pid, uint32_t tid, const std::vector<Slice>& slices) {
  ThreadState& thread = Thread(pid, tid);
  stack_.clear();
  for (const Slice& slice : slices) {
    while (!stack_.empty() && stack_.back().depth >= slice.depth) {
      WriteEnd(thread, std::max(stack_.back().end_ns, thread.last_ts));
      stack_.pop_back();
    }
    uint64_t begin = std::max(slice.begin_ns, thread.last_ts);
    uint64_t end = slice.end_ns;
    if (!stack_.empty()) end = std::min(end, stack_.back().end_ns);
    end = std::max(end, begin);
    WriteBegin(thread, slice, begin);
    stack_.push_back({slice.depth, end});
  }
  while (!stack_.empty()) {
    WriteEnd(thread, std::max(stack_.back().end_ns, thread.last_ts));
    stack_.pop_back();
  }
  max_ts_ = std::max(max_ts_, thread.last_ts);
  MaybeFlush();
}

void PerfettoWriter::WriteClocks(const ClockSnapshot& clock) {
  size_t snapshot = encoder_.BeginNested(kClockSnapshot);
  for (auto [id, ns] : {std::pair{kClockBoottime, clock.boottime_ns}, std::pair{kClockMonotonic, clock.monotonic_ns},
                        std::pair{kClockRealtime, clock.realtime_ns}}) {
    if (id == kClockRealtime && ns == 0) continue;  // not read (a merge of older traces)
    size_t c = encoder_.BeginNested(kClocks);
    encoder_.Varint(kClockId, id);
    encoder_.Varint(kClockTimestamp, ns);
    encoder_.EndNested(c);
  }
  encoder_.Varint(kPrimaryTraceClock, kClockBoottime);
  encoder_.EndNested(snapshot);
}

bool PerfettoWriter::Finish(const TraceStats& stats, std::string* error) {
  if (finished_) {
    if (error) *error = "cannot write " + file_->path() + ": trace already finished";
    return false;
  }
  finished_ = true;
  if (clock_.realtime_ns) {
    // The clocks again at the end (a trace of real clocks: the wall clock
    // may have been stepped or slewed meanwhile; trace_processor and merge
    // take the first).
    ClockSnapshot end;
    end.boottime_ns = NowNs(CLOCK_BOOTTIME);
    end.monotonic_ns = NowNs(CLOCK_MONOTONIC);
    end.realtime_ns = NowNs(CLOCK_REALTIME);
    size_t packet = encoder_.BeginNested(kTracePacket);
    encoder_.Varint(kTimestamp, end.boottime_ns);
    encoder_.Varint(kTrustedSequenceId, kGlobalSequenceId);
    WriteClocks(end);
    encoder_.EndNested(packet);
  }
  // The stats as one instant at the end of the trace, on its own track.
  size_t packet = encoder_.BeginNested(kTracePacket);
  encoder_.Varint(kTimestamp, max_ts_);
  encoder_.Varint(kTimestampClockId, kClockMonotonic);
  encoder_.Varint(kTrustedSequenceId, kGlobalSequenceId);
  size_t event = encoder_.BeginNested(kTrackEvent);
  encoder_.Varint(kEventType, kTypeInstant);
  encoder_.Varint(kEventTrackUuid, kStatsTrackUuid);
  encoder_.String(kEventCategories, "torchprobe");
  encoder_.String(kEventName, kStatsEventName);
  // One dict annotation "torchprobe" {events: N, ...}: trace_processor shows
  // it as args "debug.torchprobe.events", ... (it would rewrite dots in a
  // flat annotation name to underscores).
  size_t dict = encoder_.BeginNested(kEventDebugAnnotations);
  encoder_.String(kAnnotationName, kStatsEventName);
  auto number = [this](std::string_view name, uint64_t value) {
    size_t a = encoder_.BeginNested(kAnnotationDictEntries);
    encoder_.String(kAnnotationName, name);
    encoder_.Varint(kAnnotationUint, value);
    encoder_.EndNested(a);
  };
  for (const StatsField& field : kStatsFields) number(field.name, stats.*field.value);
  // Each probe set's section a dict of its own, {stacks: {walked: N}}:
  // "debug.torchprobe.stacks.walked" in trace_processor.
  size_t section = 0;
  std::string open;
  for (const auto& [name, count] : stats.sections) {
    size_t dot = name.find('.');
    std::string set = name.substr(0, dot);
    if (section && set != open) encoder_.EndNested(section), section = 0;
    if (!section) {
      section = encoder_.BeginNested(kAnnotationDictEntries);
      encoder_.String(kAnnotationName, set);
      open = set;
    }
    number(dot == std::string::npos ? name : name.substr(dot + 1), count.value);
  }
  if (section) encoder_.EndNested(section);
  size_t a = encoder_.BeginNested(kAnnotationDictEntries);
  encoder_.String(kAnnotationName, "attach_mode");
  encoder_.String(kAnnotationString, CleanUtf8(stats.attach_mode));
  encoder_.EndNested(a);
  encoder_.EndNested(dict);
  encoder_.EndNested(event);
  encoder_.EndNested(packet);

  FlushEncoder();
  std::string ignored;
  return file_->Commit(error ? error : &ignored);
}

void PerfettoWriter::MaybeFlush() {
  if (encoder_.size() >= (options_.compress ? kCompressChunkBytes : kFlushBytes)) FlushEncoder();
}

void PerfettoWriter::FlushEncoder() {
  if (encoder_.size() == 0) return;
  WriteChunk();
  encoder_.Clear();
}

void PerfettoWriter::WriteChunk() {
  const uint8_t* data = encoder_.data();
  size_t size = encoder_.size();
  if (options_.compress) {
    // encoder_ holds `0x0A len packet`...: a serialized Trace, which is what
    // compressed_packets carries.
    std::vector<uint8_t> deflated(compressBound(size));
    uLongf deflated_size = deflated.size();
    // zlib's default level: on a 1 s capture of a busy loop (~530k slices)
    // level 9 made the run 7.2 s long (against 2.6 s plain) for 3.8 B/slice,
    // level 6 3.1 s for 4.3 B/slice, level 1 2.7 s for 5.5 B/slice.
    if (compress2(deflated.data(), &deflated_size, data, size, Z_DEFAULT_COMPRESSION) == Z_OK) {
      compressed_.Clear();
      size_t packet = compressed_.BeginNested(kTracePacket);
      compressed_.Bytes(kCompressedPackets, deflated.data(), deflated_size);
      compressed_.EndNested(packet);
      data = compressed_.data();
      size = compressed_.size();
    }  // else (out of memory): these packets go out as they are
  }
  // After an I/O error the file keeps the message for Finish; encoding goes
  // on into the same buffer, which is simply dropped.
  if (file_->ok()) file_->Write(data, size);
  bytes_encoded_ += size;
}

}  // namespace torchprobe
