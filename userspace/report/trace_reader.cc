#include "userspace/report/trace_reader.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

#include <google/protobuf/io/coded_stream.h>

#include "schemas/perfetto_trace.pb.h"
#include "userspace/model/memory_sink.h"
#include "userspace/model/python_frames.h"
#include "userspace/model/thread_state.h"

namespace torchprobe {
namespace {

namespace pb = ::torchprobe::pftrace;

constexpr uint32_t kClockRealtime = 1;
constexpr uint32_t kClockMonotonic = 3;
constexpr uint32_t kClockBoottime = 6;
constexpr const char* kStatsEventName = "torchprobe";
constexpr const char* kStatsPrefix = "torchprobe.";

struct FileCloser {
  void operator()(FILE* f) const { fclose(f); }
};

// Incremental state of one packet sequence.
struct Sequence {
  std::unordered_map<uint64_t, std::string> event_names;
  std::unordered_map<uint64_t, std::string> annotation_names;
  std::unordered_map<uint64_t, std::string> strings;
  bool has_clock = false;
  uint32_t clock_id = 0;
  bool has_track = false;
  uint64_t track_uuid = 0;
  // The sequence's incremental clock (a packet's timestamp on it is a delta
  // from the previous one), declared by a clock snapshot; 0: none.
  uint32_t incremental_clock = 0;
  uint64_t incremental_ts = 0;
  uint64_t incremental_to_monotonic = 0;  // added (mod 2^64) to read it as MONOTONIC
  // (name_iid, overload_iid, schema_iid) -> op, for events that use iids only.
  std::map<std::tuple<uint64_t, uint64_t, uint64_t>, uint32_t> op_cache;

  void Clear() { *this = Sequence(); }
};

struct OpenTrack {
  size_t thread = 0;                // index into DecodedTrace::threads
  std::vector<int32_t> open;        // stack of open slice indices
  uint64_t last_ts = 0;
};

class Reader {
 public:
  explicit Reader(DecodedTrace* trace) : trace_(trace) {}
  void Packet(const pb::TracePacket& packet);
  void Finish();

 private:
  size_t ThreadForTrack(uint64_t uuid);
  uint32_t InternOp(const std::string& name, const std::string& overload,
                    const std::string& schema, const std::string& category);
  void TrackEvent(const pb::TracePacket& packet, Sequence& seq, uint64_t ts);
  // The packet's timestamp as CLOCK_MONOTONIC ns.
  uint64_t Timestamp(const pb::TracePacket& packet, Sequence& seq);
  void ReadStats(const pb::TrackEvent& event, const Sequence& seq);
  void ReadMemoryEvent(const pb::TrackEvent& event, const Sequence& seq, uint64_t ts, bool alloc);
  void ReadGpuActivity(const pb::TrackEvent& event, const Sequence& seq, uint64_t ts, uint64_t uuid);
  void ReadThreadState(const pb::TrackEvent& event, const Sequence& seq, uint64_t ts, uint64_t uuid,
                       const std::string& name);
  std::string AnnotationName(const pb::DebugAnnotation& a, const Sequence& seq) const;
  std::string AnnotationString(const pb::DebugAnnotation& a, const Sequence& seq) const;

  DecodedTrace* trace_;
  std::unordered_map<uint32_t, Sequence> sequences_;
  std::unordered_map<uint64_t, OpenTrack> tracks_;  // thread tracks by uuid
  std::unordered_map<uint32_t, size_t> process_index_;
  std::unordered_map<std::string, uint32_t> op_index_;
  std::unordered_map<uint64_t, size_t> gpu_open_;  // GPU stream track -> its open activity in trace_->gpu
  std::unordered_map<uint64_t, size_t> state_open_;  // thread-state track -> its open span in trace_->thread_states
  std::unordered_map<uint64_t, DecodedCategoryBytes> category_tracks_;  // memory category tracks by uuid
  std::unordered_map<std::string, size_t> input_dims_index_;  // into trace_->input_dims
};

size_t Reader::ThreadForTrack(uint64_t uuid) {
  auto it = tracks_.find(uuid);
  if (it != tracks_.end()) return it->second.thread;
  // An event before its track's descriptor: keep it, named when described.
  trace_->threads.push_back(DecodedThread{});
  trace_->threads.back().track_uuid = uuid;
  tracks_[uuid].thread = trace_->threads.size() - 1;
  return trace_->threads.size() - 1;
}

uint32_t Reader::InternOp(const std::string& name, const std::string& overload,
                          const std::string& schema, const std::string& category) {
  std::string key = name;
  key.append(1, '\0').append(overload).append(1, '\0').append(schema).append(1, '\0').append(category);
  auto [it, inserted] = op_index_.emplace(std::move(key), trace_->ops.size());
  if (inserted) trace_->ops.push_back(OpInfo{name, overload, schema, category});
  return it->second;
}

std::string Reader::AnnotationName(const pb::DebugAnnotation& a, const Sequence& seq) const {
  if (a.has_name()) return a.name();
  auto it = seq.annotation_names.find(a.name_iid());
  return it == seq.annotation_names.end() ? std::string() : it->second;
}

std::string Reader::AnnotationString(const pb::DebugAnnotation& a, const Sequence& seq) const {
  if (a.has_string_value()) return a.string_value();
  if (a.has_string_value_iid()) {
    auto it = seq.strings.find(a.string_value_iid());
    if (it != seq.strings.end()) return it->second;
  }
  return std::string();
}

void Reader::ReadStats(const pb::TrackEvent& event, const Sequence& seq) {
  TraceStats& s = trace_->stats;
  auto field = [&](const std::string& name, const pb::DebugAnnotation& a) {
    if (name == "attach_mode") {
      s.attach_mode = AnnotationString(a, seq);
      return;
    }
    uint64_t value = a.has_uint_value() ? a.uint_value() : static_cast<uint64_t>(a.int_value());
    for (const StatsField& known : kStatsFields) {
      if (name == known.name) {
        s.*known.value = value;
        return;
      }
    }
    if (name.find('.') != std::string::npos) s.Count(name) = value;  // a probe set's section
  };
  for (const pb::DebugAnnotation& a : event.debug_annotations()) {
    std::string name = AnnotationName(a, seq);
    if (name == kStatsEventName) {  // {events: N, dropped_events: N, ..., set: {count: N}}
      for (const pb::DebugAnnotation& entry : a.dict_entries()) {
        std::string entry_name = AnnotationName(entry, seq);
        if (entry.dict_entries_size() == 0) field(entry_name, entry);
        for (const pb::DebugAnnotation& count : entry.dict_entries())  // a probe set's section
          field(entry_name + "." + AnnotationName(count, seq), count);
      }
    } else if (name.rfind(kStatsPrefix, 0) == 0) {  // flat "torchprobe.events"
      field(name.substr(strlen(kStatsPrefix)), a);
    }
  }
  trace_->has_stats = true;
}

void Reader::ReadGpuActivity(const pb::TrackEvent& event, const Sequence& seq, uint64_t ts, uint64_t uuid) {
  DecodedGpuActivity g;
  g.begin_ns = g.end_ns = ts;
  g.name = event.name();
  g.category = event.categories(0);
  g.track = uuid;
  for (const pb::DebugAnnotation& a : event.debug_annotations()) {
    std::string key = AnnotationName(a, seq);
    if (key == "device") g.device = static_cast<uint32_t>(a.uint_value());
    else if (key == "stream") g.stream = static_cast<uint32_t>(a.uint_value());
    else if (key == "correlation") g.correlation = a.uint_value();
    else if (key == "op") g.op = AnnotationString(a, seq);
  }
  gpu_open_[uuid] = trace_->gpu.size();
  trace_->gpu.push_back(std::move(g));
}

void Reader::ReadThreadState(const pb::TrackEvent& event, const Sequence& seq, uint64_t ts, uint64_t uuid,
                             const std::string& name) {
  DecodedThreadState state;
  state.begin_ns = state.end_ns = ts;
  state.name = name;
  for (const pb::DebugAnnotation& a : event.debug_annotations()) {
    std::string key = AnnotationName(a, seq);
    if (key == "pid") state.pid = static_cast<uint32_t>(a.uint_value());
    else if (key == "tid") state.tid = static_cast<uint32_t>(a.uint_value());
  }
  state_open_[uuid] = trace_->thread_states.size();
  trace_->thread_states.push_back(std::move(state));
}

void Reader::ReadMemoryEvent(const pb::TrackEvent& event, const Sequence& seq, uint64_t ts,
                             bool alloc) {
  DecodedMemoryEvent m;
  m.ts_ns = ts;
  m.alloc = alloc;
  for (const pb::DebugAnnotation& a : event.debug_annotations()) {
    std::string key = AnnotationName(a, seq);
    uint64_t number = a.has_pointer_value() ? a.pointer_value() : a.uint_value();
    if (key == "bytes") m.bytes = number;
    else if (key == "address") m.address = number;
    else if (key == "id") m.id = number;
    else if (key == "allocated") m.allocated = number;
    else if (key == "alloc_ts") m.alloc_ts_ns = number;
    else if (key == "pid") m.pid = static_cast<uint32_t>(number);
    else if (key == "tid") m.tid = static_cast<uint32_t>(number);
    else if (key == "preexisting") m.preexisting = a.bool_value();
    else if (key == "op") m.op = AnnotationString(a, seq);
    else if (key == "alloc_op") m.alloc_op = AnnotationString(a, seq);
    else if (key == kMemoryPythonArg) m.python = AnnotationString(a, seq);
    else if (key == "device") m.device = AnnotationString(a, seq);
    else if (key == "reserved") m.reserved = number;
  }
  trace_->memory.push_back(std::move(m));
}

uint64_t Reader::Timestamp(const pb::TracePacket& packet, Sequence& seq) {
  uint64_t ts = packet.timestamp();
  uint32_t clock = packet.has_timestamp_clock_id() ? packet.timestamp_clock_id()
                   : seq.has_clock                 ? seq.clock_id
                                                   : kClockBoottime;
  if (seq.incremental_clock && clock == seq.incremental_clock) {
    if (packet.has_timestamp()) seq.incremental_ts += ts;
    return seq.incremental_ts + seq.incremental_to_monotonic;
  }
  if (clock == kClockBoottime && trace_->has_clock_snapshot) {
    ts = ts - trace_->clock.boottime_ns + trace_->clock.monotonic_ns;
  }
  return ts;
}

void Reader::TrackEvent(const pb::TracePacket& packet, Sequence& seq, uint64_t ts) {
  const pb::TrackEvent& event = packet.track_event();
  uint64_t uuid = event.has_track_uuid() ? event.track_uuid() : seq.track_uuid;
  bool has_track = event.has_track_uuid() || seq.has_track;

  std::string name;
  if (event.has_name()) {
    name = event.name();
  } else if (event.has_name_iid()) {
    auto it = seq.event_names.find(event.name_iid());
    if (it != seq.event_names.end()) name = it->second;
  }

  switch (event.type()) {
    case pb::TrackEvent::TYPE_INSTANT:
      if (name == kStatsEventName) ReadStats(event, seq);
      else if ((name == "alloc" || name == "free") && event.categories_size() == 1 &&
               event.categories(0) == "memory")
        ReadMemoryEvent(event, seq, ts, name == "alloc");
      return;
    case pb::TrackEvent::TYPE_SLICE_BEGIN: {
      if (!has_track) return;
      if (event.categories_size() == 1 && IsGpuCategory(event.categories(0))) {
        ReadGpuActivity(event, seq, ts, uuid);
        return;
      }
      if (event.categories_size() == 1 && event.categories(0) == kThreadStateCategory) {
        ReadThreadState(event, seq, ts, uuid, name);
        return;
      }
      size_t thread_index = ThreadForTrack(uuid);
      OpenTrack& track = tracks_[uuid];
      DecodedSlice slice;
      slice.begin_ns = ts;
      slice.depth = static_cast<uint16_t>(track.open.size());
      slice.parent = track.open.empty() ? -1 : track.open.back();
      uint64_t overload_iid = 0, schema_iid = 0;
      bool iids_only = event.has_name_iid();
      std::string overload, schema;
      for (const pb::DebugAnnotation& a : event.debug_annotations()) {
        std::string key = AnnotationName(a, seq);
        if (key == "overload") {
          overload = AnnotationString(a, seq);
          overload_iid = a.string_value_iid();
          iids_only &= a.has_string_value_iid();
        } else if (key == "schema") {
          schema = AnnotationString(a, seq);
          schema_iid = a.string_value_iid();
          iids_only &= a.has_string_value_iid();
        } else if (key == "repaired_begin") {
          slice.repaired_begin = a.bool_value();
        } else if (key == "repaired_end") {
          slice.repaired_end = a.bool_value();
        } else if (key == "unwound") {
          slice.unwound = a.bool_value();
        } else if (key == kPythonLineArg) {
          slice.python_line = static_cast<int32_t>(a.uint_value());
        } else if (key == kCallerLineArg) {
          slice.caller_line = static_cast<int32_t>(a.uint_value());
        } else if (key == "Input Dims") {
          auto [it, added] = input_dims_index_.try_emplace(AnnotationString(a, seq), trace_->input_dims.size());
          if (added) trace_->input_dims.push_back(it->first);
          slice.input_dims = static_cast<int32_t>(it->second);
        }
      }
      // Ops carry the interned category "aten" (OpInfo's ""); other kinds
      // name theirs inline.
      std::string category = event.categories_size() > 0 ? event.categories(0) : "";
      if (category == "aten") category.clear();
      if (iids_only && category.empty()) {
        auto key = std::make_tuple(event.name_iid(), overload_iid, schema_iid);
        auto it = seq.op_cache.find(key);
        if (it == seq.op_cache.end()) {
          it = seq.op_cache.emplace(key, InternOp(name, overload, schema, category)).first;
        }
        slice.op = it->second;
      } else {
        slice.op = InternOp(name, overload, schema, category);
      }
      std::vector<DecodedSlice>& slices = trace_->threads[thread_index].slices;
      track.open.push_back(static_cast<int32_t>(slices.size()));
      track.last_ts = std::max(track.last_ts, ts);
      slices.push_back(slice);
      return;
    }
    case pb::TrackEvent::TYPE_SLICE_END: {
      if (!has_track) return;
      if (auto gpu = gpu_open_.find(uuid); gpu != gpu_open_.end()) {
        trace_->gpu[gpu->second].end_ns = ts;
        gpu_open_.erase(gpu);
        return;
      }
      if (auto state = state_open_.find(uuid); state != state_open_.end()) {
        trace_->thread_states[state->second].end_ns = ts;
        state_open_.erase(state);
        return;
      }
      auto it = tracks_.find(uuid);
      if (it == tracks_.end() || it->second.open.empty()) {
        ++trace_->unmatched_ends;
        return;
      }
      OpenTrack& track = it->second;
      trace_->threads[track.thread].slices[track.open.back()].end_ns = ts;
      track.open.pop_back();
      track.last_ts = std::max(track.last_ts, ts);
      return;
    }
    case pb::TrackEvent::TYPE_COUNTER:
      if (auto it = category_tracks_.find(uuid); it != category_tracks_.end() && event.has_counter_value()) {
        DecodedCategoryBytes b = it->second;
        b.ts_ns = ts;
        b.bytes = static_cast<uint64_t>(event.counter_value());
        trace_->memory_categories.push_back(std::move(b));
      }
      return;
    default:
      return;
  }
}

void Reader::Packet(const pb::TracePacket& packet) {
  ++trace_->packets;
  if (packet.previous_packet_dropped()) ++trace_->dropped_packets;
  Sequence& seq = sequences_[packet.trusted_packet_sequence_id()];
  if (packet.sequence_flags() & pb::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED) seq.Clear();
  if (packet.has_trace_packet_defaults()) {
    const pb::TracePacketDefaults& d = packet.trace_packet_defaults();
    seq.has_clock = d.has_timestamp_clock_id();
    seq.clock_id = d.timestamp_clock_id();
    seq.has_track = d.track_event_defaults().has_track_uuid();
    seq.track_uuid = d.track_event_defaults().track_uuid();
  }
  if (packet.has_interned_data()) {
    const pb::InternedData& in = packet.interned_data();
    for (const auto& e : in.event_names()) seq.event_names[e.iid()] = e.name();
    for (const auto& e : in.debug_annotation_names()) seq.annotation_names[e.iid()] = e.name();
    for (const auto& e : in.debug_annotation_string_values()) seq.strings[e.iid()] = e.str();
  }
  if (packet.has_clock_snapshot()) {
    bool boot = false, mono = false;
    ClockSnapshot clock;
    for (const auto& c : packet.clock_snapshot().clocks()) {
      if (c.clock_id() == kClockBoottime) boot = true, clock.boottime_ns = c.timestamp();
      if (c.clock_id() == kClockMonotonic) mono = true, clock.monotonic_ns = c.timestamp();
      if (c.clock_id() == kClockRealtime) clock.realtime_ns = c.timestamp();
    }
    if (boot && mono && !trace_->has_clock_snapshot) {
      trace_->has_clock_snapshot = true;
      trace_->clock = clock;
    }
    for (const auto& c : packet.clock_snapshot().clocks()) {
      if (!c.is_incremental()) continue;
      seq.incremental_clock = c.clock_id();
      seq.incremental_ts = c.timestamp();
      seq.incremental_to_monotonic = mono ? clock.monotonic_ns - c.timestamp() : 0;
    }
  }
  uint64_t ts = Timestamp(packet, seq);
  if (packet.has_track_descriptor()) {
    const pb::TrackDescriptor& d = packet.track_descriptor();
    // "CPU memory: PARAMETER" under its process (PerfettoWriter::MemoryCategoryUuid).
    if (size_t colon = d.name().find(" memory: "); d.has_counter() && colon != std::string::npos &&
                                                     (d.uuid() >> 60) == 13) {
      DecodedCategoryBytes& b = category_tracks_[d.uuid()];
      b.pid = static_cast<uint32_t>(d.uuid() & 0xffffffff);
      b.device = d.name().substr(0, colon);
      b.category = d.name().substr(colon + 9);
    }
    if (d.has_thread()) {
      DecodedThread& t = trace_->threads[ThreadForTrack(d.uuid())];
      t.pid = static_cast<uint32_t>(d.thread().pid());
      t.tid = static_cast<uint32_t>(d.thread().tid());
      t.name = d.thread().thread_name();
    } else if (d.has_process()) {
      uint32_t pid = static_cast<uint32_t>(d.process().pid());
      auto [it, inserted] = process_index_.emplace(pid, trace_->processes.size());
      if (inserted) trace_->processes.push_back(DecodedProcess{});
      DecodedProcess& p = trace_->processes[it->second];
      p.pid = pid;
      p.name = d.process().process_name();
      p.cmdline.clear();
      for (const std::string& arg : d.process().cmdline()) {
        if (!p.cmdline.empty()) p.cmdline += ' ';
        p.cmdline += arg;
      }
    }
  }
  if (packet.has_track_event()) TrackEvent(packet, seq, ts);
}

void Reader::Finish() {
  for (auto& [uuid, track] : tracks_) {
    for (int32_t index : track.open) {
      DecodedSlice& s = trace_->threads[track.thread].slices[index];
      s.ended = false;
      s.end_ns = std::max(track.last_ts, s.begin_ns);
      ++trace_->unterminated;
    }
    track.open.clear();
  }
}

// TracePacket.compressed_packets: a zlib (or gzip) stream of a serialized
// Trace, whose packets are read as if they stood in the file there.
bool ReadCompressed(const std::string& compressed, Reader& reader, std::string* why) {
  std::string trace;
  z_stream z = {};
  if (inflateInit2(&z, 32 + MAX_WBITS) != Z_OK) {  // 32: zlib or gzip header
    *why = "cannot start zlib";
    return false;
  }
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  z.avail_in = static_cast<uInt>(compressed.size());
  int result = Z_OK;
  while (result == Z_OK) {
    size_t done = trace.size();
    trace.resize(std::max<size_t>(done * 2, compressed.size() * 8 + 4096));
    z.next_out = reinterpret_cast<Bytef*>(trace.data() + done);
    z.avail_out = static_cast<uInt>(trace.size() - done);
    result = inflate(&z, Z_NO_FLUSH);
    trace.resize(trace.size() - z.avail_out);
    if (result == Z_BUF_ERROR && z.avail_in > 0) result = Z_OK;  // needs more room
  }
  inflateEnd(&z);
  if (result != Z_STREAM_END) {
    *why = "does not inflate (zlib: " + std::string(z.msg ? z.msg : zError(result)) + ")";
    return false;
  }
  pb::TracePacket packet;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(trace.data()),
                                            static_cast<int>(trace.size()));
  while (!in.ExpectAtEnd()) {
    uint32_t length = 0;
    if (in.ReadTag() != 0x0A || !in.ReadVarint32(&length)) {
      *why = "inflates to something other than trace packets";
      return false;
    }
    auto limit = in.PushLimit(static_cast<int>(length));
    if (!packet.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
      *why = "holds a packet that does not parse";
      return false;
    }
    in.PopLimit(limit);
    reader.Packet(packet);
  }
  return true;
}

std::string Hex(unsigned byte) {
  char buf[8];
  snprintf(buf, sizeof(buf), "0x%02x", byte & 0xff);
  return buf;
}

}  // namespace

const DecodedThread* DecodedTrace::FindThread(uint32_t pid, uint32_t tid) const {
  for (const DecodedThread& t : threads) {
    if (t.pid == pid && t.tid == tid) return &t;
  }
  return nullptr;
}

size_t DecodedTrace::slice_count() const {
  size_t n = 0;
  for (const DecodedThread& t : threads) n += t.slices.size();
  return n;
}

bool ReadTrace(const std::string& path, DecodedTrace* trace, std::string* error) {
  *trace = DecodedTrace();
  std::vector<char> io_buffer(1 << 20);  // outlives the FILE that uses it
  std::unique_ptr<FILE, FileCloser> file(fopen(path.c_str(), "rbe"));
  if (!file) {
    *error = "cannot open " + path + ": " + strerror(errno);
    return false;
  }
  struct stat st;
  if (fstat(fileno(file.get()), &st) != 0) {
    *error = "cannot open " + path + ": " + strerror(errno);
    return false;
  }
  if (S_ISDIR(st.st_mode)) {
    *error = "cannot open " + path + ": " + strerror(EISDIR);
    return false;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    *error = path + ": empty file, not a trace";
    return false;
  }
  setvbuf(file.get(), io_buffer.data(), _IOFBF, io_buffer.size());

  trace->file_size = size;
  Reader reader(trace);
  pb::TracePacket packet;
  std::string bytes;
  uint64_t offset = 0;
  auto read_error = [&] {
    *error = "cannot read " + path + ": " + strerror(ferror(file.get()) ? errno : EIO);
    return false;
  };
  // The file ends inside the packet at `start`. Keep what came before it, as
  // trace_processor does; unlike trace_processor, slices the cut left open
  // keep an end (their thread's last timestamp) and are counted unterminated,
  // where it gives them dur = -1. Without one whole packet there is no trace.
  auto cut_at = [&](uint64_t start, const std::string& why) {
    if (trace->packets == 0) {
      *error = path + ": truncated at byte " + std::to_string(start) + " (" + why + ")";
      return false;
    }
    trace->truncated = true;
    trace->truncated_at = start;
    return true;
  };
  while (offset < size) {
    const uint64_t start = offset;
    int tag = fgetc(file.get());
    if (tag == EOF) return read_error();
    ++offset;
    if (tag != 0x0A) {  // Trace.packet, length-delimited
      *error = path + ": not a Perfetto trace (byte " + std::to_string(start) + " is " +
               Hex(static_cast<unsigned>(tag)) + ")";
      return false;
    }
    uint64_t length = 0;
    bool length_cut = false;
    for (int shift = 0;; shift += 7) {
      int c = offset < size ? fgetc(file.get()) : EOF;
      if (c == EOF) {
        length_cut = true;
        break;
      }
      ++offset;
      if (shift >= 64) {
        *error = path + ": not a Perfetto trace (bad packet length at byte " +
                 std::to_string(start + 1) + ")";
        return false;
      }
      length |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) break;
    }
    if (length_cut || length > size - offset) {
      std::string why = length_cut ? "packet length cut off, " + std::to_string(size - start) +
                                         " bytes left"
                                   : "packet of " + std::to_string(length) + " bytes, " +
                                         std::to_string(size - offset) + " left";
      if (!cut_at(start, why)) return false;
      break;
    }
    bytes.resize(length);
    if (length && fread(bytes.data(), 1, length, file.get()) != length) return read_error();
    if (!packet.ParseFromString(bytes)) {
      *error = path + ": packet at byte " + std::to_string(start) + " (" +
               std::to_string(length) + " bytes) does not parse: not a Perfetto trace";
      return false;
    }
    offset += length;
    if (packet.has_compressed_packets()) {
      std::string why;
      if (!ReadCompressed(packet.compressed_packets(), reader, &why)) {
        *error = path + ": compressed packets at byte " + std::to_string(start) + " " + why;
        return false;
      }
    } else {
      reader.Packet(packet);
    }
  }
  reader.Finish();
  return true;
}

}  // namespace torchprobe
