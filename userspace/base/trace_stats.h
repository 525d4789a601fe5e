// What a trace counts about itself: every stage adds to one TraceStats
// (attach its probe cost, collect its drops, the model its repairs), the
// writers write it whole and the readers read it back, by one list of names.
#ifndef TORCHPROBE_BASE_TRACE_STATS_H
#define TORCHPROBE_BASE_TRACE_STATS_H

#include <cstdint>
#include <map>
#include <string>

namespace torchprobe {

// How a count goes from one capture window to the next (record --every,
// --start-after, --steps): declared with the field, never carried by hand.
enum class StatsScope : uint8_t {
  kWindow,  // what a window saw: each window counts its own, from 0
  kRun,     // what planning and attaching counted: every window of the run has it
};

// A count of a probe set's own section (TraceStats::sections).
struct SectionCount {
  uint64_t value = 0;
  StatsScope scope = StatsScope::kWindow;
};

// Counted, never hidden: every number here ends up in the trace metadata and
// on stderr.
struct TraceStats {
  uint64_t events = 0;              // op events decoded
  uint64_t dropped_events = 0;      // lost in BPF (ring buffer full)
  uint64_t unknown_events = 0;      // records of a type the decoder skipped
  uint64_t begin_repaired = 0;      // slices whose entry was not seen
  uint64_t end_repaired = 0;        // slices whose return was not seen
  uint64_t mismatched_exits = 0;    // lost returns: ops closed when a later call or return
                                    // on their frame or above showed they had returned
  uint64_t unwound = 0;             // ops closed where a C++ exception through them was caught
  uint64_t before_start = 0;        // returns of ops that began before the trace and ended
                                    // before all probes were live: left out
  uint64_t foreign_returns = 0;     // returns at a `ret` shared by tail call that closed no
                                    // open op: another caller's, ignored
  uint64_t after_stop = 0;          // returns of ops that began after the entry probes
                                    // were removed at stop: left out
  uint64_t probed_symbols = 0;      // at::_ops::*::call functions probed
  uint64_t unresolved_symbols = 0;  // of those, without a schema string
  uint64_t without_returns = 0;     // of those, with no `ret` found to probe
  uint64_t catch_probes = 0;        // __cxa_begin_catch probes attached (0: ops unwound by
                                    // an exception are closed later, by the next op)
  uint64_t uretprobe_processes = 0; // processes whose returns were uretprobes (fast route)
  uint64_t ret_fallbacks = 0;       // processes whose returns were `ret` probes instead
  uint64_t throws_fixed = 0;        // exceptions before which return addresses were given back
  uint64_t returns_restored = 0;    // ops whose return address was given back and that then
                                    // returned (not unwound): closed at the next call or
                                    // return on their frame or above
  uint64_t op_slices = 0;           // op slices handed to the writer
  uint64_t op_time_ns = 0;          // time inside top-level ops: the sum of their slices
  // The probes' own cost (userspace/attach/probe_cost.h), a lower bound:
  uint64_t probe_ns_per_op = 0;     // per op slice, in the returns route this trace used
                                    // (0: not calibrated)
  uint64_t probe_ns_uretprobe = 0;  // calibrated: entry uprobe + uretprobe (0: not measured)
  uint64_t probe_ns_ret = 0;        // calibrated: entry uprobe + uprobes on `ret`
  uint64_t probe_ns_calibration = 0;  // wall time the calibration took
  uint64_t memory_traced = 0;       // 1: CPU allocations were probed (--memory)
  uint64_t allocations = 0;         // CPU allocations seen (c10::alloc_cpu)
  uint64_t frees = 0;               // CPU frees seen (c10::free_cpu)
  uint64_t preexisting_frees = 0;   // of those, of memory allocated before the trace
  uint64_t preexisting_unsized = 0; // ... whose size could not be read
  uint64_t lost_frees = 0;          // allocations whose free was not seen (lost, or
                                    // the address came back without one)
  uint64_t memory_dropped = 0;      // memory events lost in BPF (ring buffer full)
  uint64_t memory_alive_at_end = 0; // allocations made while tracing, not freed by its end
  uint64_t device_events = 0;       // device allocator block mallocs and frees (CUDA)
  uint64_t segment_events = 0;      // cudaMalloc and cudaFree calls
  uint64_t boxed_ops_unlisted = 0;  // ops seen only through the boxed path, named without a
                                    // schema (no at::_ops function names them)
  uint64_t boxed_unread = 0;        // boxed calls whose operator could not be read
  uint64_t boxed_duplicates = 0;    // at::_ops::<op>::call entries right inside a boxed call of
                                    // the same op: one dispatcher entry, one slice, not counted twice
  uint64_t annotations = 0;         // record_function ranges begun
  uint64_t annotations_unprobed = 0;  // processes whose libtorch could not be probed for them
  uint64_t annotation_names_unread = 0;  // ... whose name could not be read (shown as such)
  uint64_t annotation_names_cut = 0;     // ... whose name was cut at TP_ANNOT_NAME_MAX bytes
  uint64_t steps = 0;               // ProfilerStep# slices made (StepSlicer)
  uint64_t outside_steps = 0;       // --steps: slices (steps and all inside them) outside
                                    // the step windows, left out of every file
  uint64_t memory_outside_steps = 0;  // --steps --memory: allocations and frees outside the
                                      // step windows, left out of every file
  uint64_t shapes_traced = 0;       // 1: ops' Tensor arguments were read (--shapes)
  uint64_t tensor_args_read = 0;    // Tensor arguments whose metadata was read
  uint64_t tensor_args_unplaced = 0;  // ... not read: where the op has them is not known
                                    // (an argument type the ABI rules do not place)
  uint64_t tensor_args_past_limit = 0;  // ... not read: past the first TP_SHAPES_TENSORS
  uint64_t tensor_args_unreadable = 0;  // ... not read: a read failed (an undefined Tensor)
  uint64_t tensor_args_cut = 0;     // ... with more than TP_SHAPES_DIMS dims: shape not written
  uint64_t shapes_without_layout = 0;  // processes whose TensorImpl layout was not found: no shapes
  uint64_t sequence_numbers_unplaced = 0;  // processes whose sequence number's TLS place was not found
  uint64_t sequence_numbers_unread = 0;    // op entries whose sequence number could not be read
  uint64_t shapes_unattached = 0;   // entries with shapes that opened no slice of their own
                                    // (a boxed call's inner entry): their shapes are dropped
  // GPU activity from the CUPTI collector (--cupti; model/gpu_join):
  uint64_t gpu_processes = 0;       // processes whose collector reported in
  uint64_t gpu_activities = 0;      // kernels, copies and fills written
  uint64_t gpu_unjoined = 0;        // ... of which no CPU call of ours was found for
  uint64_t gpu_clamped = 0;         // ... that began before their stream's previous one ended
  uint64_t gpu_after_stop = 0;      // activities of calls made after the trace (window) ended: left out
  uint64_t gpu_api_calls = 0;       // CUDA API calls CUPTI recorded
  uint64_t gpu_records_dropped = 0; // records the collector could not send (socket full)
  uint64_t gpu_cupti_dropped = 0;   // records CUPTI itself dropped
  uint64_t gpu_unreadable = 0;      // malformed or unknown records from the collector, skipped
  uint64_t gpu_refused_datagrams = 0;  // datagrams on the CUPTI socket from processes the run does
                                       // not trace (the kernel names the sender): refused
  uint64_t gpu_queue_full = 0;      // records of the run's collectors (or launches to join them to)
                                    // past a bound of what torchprobe holds: left out
  uint64_t gpu_injected = 0;        // --inject-cupti: running processes the collector was loaded into
  uint64_t gpu_not_injected = 0;    // ... it could not be loaded into (no CUDA, no launch): CPU side only
  uint64_t gpu_before_start = 0;    // activities of calls an injected collector saw before our
                                    // probes saw the process' first call: left out
  uint64_t children_held = 0;       // forked children held stopped at their fork until attached
  uint64_t children_held_ns = 0;    // ... the time they were held, summed
  uint64_t children_untraced = 0;   // forked children not held (a kernel before 6.13): traced
                                    // only once attached, their first moments missed
  uint64_t children_untraced_ns = 0;  // ... the time from their fork to their links, summed
  uint64_t autograd_nodes_unnamed = 0;  // autograd engine calls whose node's vtable was not named
  uint64_t autograd_python_nodes = 0;   // ... run for a Python Function (PyNode) whose Python
                                        // class, the profiler's name, could not be read
  // A probe set's own counts, each named "set.count" (e.g.
  // "stacks.truncated") and declared where the set counts it, with its
  // scope: written and read back with the fields of kStatsFields, added up
  // by a merge, carried across windows by their scope. A new set counts
  // here rather than in a field of its own above.
  std::map<std::string, SectionCount> sections;
  // The count `name` of a section, made 0 with `scope` when first named.
  uint64_t& Count(const std::string& name, StatsScope scope = StatsScope::kWindow) {
    auto [it, made] = sections.try_emplace(name);
    if (made) it->second.scope = scope;
    return it->second.value;
  }
  // ... read: 0 when never counted (an older trace, a set not run).
  uint64_t CountOf(const std::string& name) const {
    auto it = sections.find(name);
    return it == sections.end() ? 0 : it->second.value;
  }
  std::string attach_mode;          // "uprobe_multi" or "uprobe"
  uint64_t attach_ns = 0;           // time to attach all op probes
  uint64_t detach_ns = 0;           // time to detach them: until their breakpoints were out of
                                    // the targets' code (what the targets paid)
  uint64_t release_ns = 0;          // until the kernel let go of their links (its grace periods
                                    // after the breakpoints are out); summary only, not in traces
};

// Every numeric TraceStats field with the name it carries in a trace: the
// writer writes them all and the reader reads them back from this one list.
struct StatsField {
  const char* name;
  uint64_t TraceStats::*value;
  StatsScope scope = StatsScope::kWindow;
};
inline constexpr StatsField kStatsFields[] = {
    {"events", &TraceStats::events},
    {"dropped_events", &TraceStats::dropped_events},
    {"unknown_events", &TraceStats::unknown_events},
    {"begin_repaired", &TraceStats::begin_repaired},
    {"end_repaired", &TraceStats::end_repaired},
    {"mismatched_exits", &TraceStats::mismatched_exits},
    {"before_start", &TraceStats::before_start},
    {"after_stop", &TraceStats::after_stop},
    {"unwound", &TraceStats::unwound},
    {"foreign_returns", &TraceStats::foreign_returns},
    {"without_returns", &TraceStats::without_returns, StatsScope::kRun},
    {"catch_probes", &TraceStats::catch_probes, StatsScope::kRun},
    {"uretprobe_processes", &TraceStats::uretprobe_processes, StatsScope::kRun},
    {"ret_fallbacks", &TraceStats::ret_fallbacks, StatsScope::kRun},
    {"throws_fixed", &TraceStats::throws_fixed},
    {"returns_restored", &TraceStats::returns_restored},
    {"probed_symbols", &TraceStats::probed_symbols, StatsScope::kRun},
    {"unresolved_symbols", &TraceStats::unresolved_symbols, StatsScope::kRun},
    {"memory_traced", &TraceStats::memory_traced},
    {"allocations", &TraceStats::allocations},
    {"frees", &TraceStats::frees},
    {"preexisting_frees", &TraceStats::preexisting_frees},
    {"preexisting_unsized", &TraceStats::preexisting_unsized},
    {"lost_frees", &TraceStats::lost_frees},
    {"memory_dropped", &TraceStats::memory_dropped},
    {"memory_alive_at_end", &TraceStats::memory_alive_at_end},
    {"device_events", &TraceStats::device_events},
    {"segment_events", &TraceStats::segment_events},
    {"boxed_ops_unlisted", &TraceStats::boxed_ops_unlisted},
    {"boxed_unread", &TraceStats::boxed_unread},
    {"boxed_duplicates", &TraceStats::boxed_duplicates},
    {"annotations", &TraceStats::annotations},
    {"annotations_unprobed", &TraceStats::annotations_unprobed},
    {"annotation_names_unread", &TraceStats::annotation_names_unread},
    {"annotation_names_cut", &TraceStats::annotation_names_cut},
    {"steps", &TraceStats::steps},
    {"outside_steps", &TraceStats::outside_steps},
    {"memory_outside_steps", &TraceStats::memory_outside_steps},
    {"shapes_traced", &TraceStats::shapes_traced},
    {"tensor_args_read", &TraceStats::tensor_args_read},
    {"tensor_args_unplaced", &TraceStats::tensor_args_unplaced},
    {"tensor_args_past_limit", &TraceStats::tensor_args_past_limit},
    {"tensor_args_unreadable", &TraceStats::tensor_args_unreadable},
    {"tensor_args_cut", &TraceStats::tensor_args_cut},
    {"shapes_without_layout", &TraceStats::shapes_without_layout},
    {"sequence_numbers_unplaced", &TraceStats::sequence_numbers_unplaced},
    {"sequence_numbers_unread", &TraceStats::sequence_numbers_unread},
    {"shapes_unattached", &TraceStats::shapes_unattached},
    {"gpu_processes", &TraceStats::gpu_processes},
    {"gpu_activities", &TraceStats::gpu_activities},
    {"gpu_unjoined", &TraceStats::gpu_unjoined},
    {"gpu_clamped", &TraceStats::gpu_clamped},
    {"gpu_after_stop", &TraceStats::gpu_after_stop},
    {"gpu_api_calls", &TraceStats::gpu_api_calls},
    {"gpu_records_dropped", &TraceStats::gpu_records_dropped},
    {"gpu_cupti_dropped", &TraceStats::gpu_cupti_dropped},
    {"gpu_unreadable", &TraceStats::gpu_unreadable},
    {"gpu_refused_datagrams", &TraceStats::gpu_refused_datagrams},
    {"gpu_queue_full", &TraceStats::gpu_queue_full},
    {"gpu_injected", &TraceStats::gpu_injected},
    {"gpu_not_injected", &TraceStats::gpu_not_injected},
    {"gpu_before_start", &TraceStats::gpu_before_start},
    {"children_held", &TraceStats::children_held},
    {"children_held_ns", &TraceStats::children_held_ns},
    {"children_untraced", &TraceStats::children_untraced},
    {"children_untraced_ns", &TraceStats::children_untraced_ns},
    {"autograd_nodes_unnamed", &TraceStats::autograd_nodes_unnamed},
    {"autograd_python_nodes", &TraceStats::autograd_python_nodes},
    {"attach_ns", &TraceStats::attach_ns},
    {"detach_ns", &TraceStats::detach_ns},
    {"op_slices", &TraceStats::op_slices},
    {"op_time_ns", &TraceStats::op_time_ns},
    {"probe_ns_per_op", &TraceStats::probe_ns_per_op},
    {"probe_ns_uretprobe", &TraceStats::probe_ns_uretprobe},
    {"probe_ns_ret", &TraceStats::probe_ns_ret},
    {"probe_ns_calibration", &TraceStats::probe_ns_calibration},
};

// `stats` as the next capture window begins: the run's counts kept, the
// window's own back to 0 (and the strings, the run's, kept).
inline TraceStats NextWindowStats(const TraceStats& stats) {
  TraceStats next = stats;
  for (const StatsField& field : kStatsFields)
    if (field.scope == StatsScope::kWindow) next.*field.value = 0;
  for (auto& [name, count] : next.sections)
    if (count.scope == StatsScope::kWindow) count.value = 0;
  return next;
}

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_TRACE_STATS_H
