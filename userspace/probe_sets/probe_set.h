// A probe set: one capability (annotations, memory, CUDA calls, ...) with
// one home per stage. The record session only wires probe sets together:
// it asks each what the BPF object must load, tells it when a process has
// its libtorch attached (and again at each library load), when a process'
// program is gone, when a capture window gets fresh models and outputs; the
// events of its types come to it through the router it registered them with.
// Everything a set knows about its own links, plans and models stays inside
// it. The ops set (ops/) is the first: a process is traced once its libtorch
// ops are attached, and the other sets attach beside them.
#ifndef TORCHPROBE_PROBE_SETS_PROBE_SET_H
#define TORCHPROBE_PROBE_SETS_PROBE_SET_H

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "userspace/attach/bpf_programs.h"
#include "userspace/attach/probe_keeper.h"
#include "userspace/attach/probe_links.h"
#include "userspace/base/op_table.h"
#include "userspace/base/proc_maps.h"
#include "userspace/base/status.h"
#include "userspace/discover/op_probes.h"
#include "userspace/collect/event_router.h"
#include "userspace/export/trace_fanout.h"
#include "userspace/model/op_stack_model.h"

namespace torchprobe {

// What every set attaches with, fixed once the BPF object is loaded.
struct ProbeSetContext {
  BpfPrograms* bpf = nullptr;
  ProbeKeeper* keeper = nullptr;  // owns every link, so probes come off however torchprobe ends
  bool use_uprobe_multi = true;
};

// One capture window's models and outputs (the whole run's, without windows).
struct ModelWiring {
  OpStackModel* model = nullptr;  // ops open on each thread; its stats go into every output
  TraceSink* outputs = nullptr;   // where the window's slices go, past the step slicer
  TraceFanout* files = nullptr;   // the window's output files; null under --steps, whose
                                  // windows change them at step boundaries
  MemorySink* memory = nullptr;   // where allocations go: the files, or under --steps the
                                  // step windows, which keep those inside their steps
  MemorySinks* memory_also = nullptr;  // run-long sinks (--memory-timeline) of the events
                                       // `memory` keeps: a set adds its own here
  OpTable* ops = nullptr;         // names by op id; sets may append theirs
  NameSource* names = nullptr;    // process and thread names
  std::function<void()> ops_grew; // call after appending to `ops`: writers learn the names
};

// A process whose libtorch is attached: the image sets look beside.
struct TracedProcess {
  uint32_t pid = 0;
  std::string torch_path;      // its libtorch_cpu, as the host sees it
  std::string torch_identity;  // dev:inode of that file
};

class ProbeSet {
 public:
  virtual ~ProbeSet() = default;
  // Registers the event types this set decodes (its structs in
  // bpf/events.h), once, before the first record is read. Handlers of a type
  // run in registration order: every set's Route, then every set's
  // RouteLate (an op entry that carries a call's arguments: the sets take
  // them first, then the op opens with its caller innermost).
  virtual void Route(EventRouter& router) {}
  virtual void RouteLate(EventRouter& router) {}
  // What the BPF object must load for this set.
  virtual void Configure(BpfConfig& config) const {}
  virtual void SetContext(const ProbeSetContext& context) { context_ = context; }
  // Attaches what this set probes in `process` that is mapped and not yet
  // attached: called once its libtorch is attached and again after each of
  // its library loads. An error stops the run (one line); a set that cannot
  // probe a process it could count it and return Ok.
  virtual Status Attach(const TracedProcess& process) = 0;
  // The process' program is gone (exec or exit): its links go.
  virtual void Release(uint32_t pid) = 0;
  // `pid` is one of the run's processes from `since_ns` on (CLOCK_MONOTONIC,
  // its fork; 0: it was there before the run): launched, named, or forked
  // by one. Said as soon as the session learns of it (a fork: when its
  // event is read), before it is attached, again when it becomes a target.
  virtual void Follow(uint32_t pid, uint64_t since_ns) {}
  // ... its process exited: the pid may be another process' from now on.
  virtual void Exited(uint32_t pid) {}
  // A thread of a traced process exited (its last events are read).
  virtual void ThreadExited(uint32_t pid, uint32_t tid) {}
  // A set that reads every libtorch op's arguments at its entry: the program
  // that enters libtorch's ops instead of op_enter (one set at most), and
  // what it reads each op with (bpf/events.h tp_op_layout). Asked by the ops
  // set as it attaches an image.
  virtual const char* OpEntryProgram() const { return nullptr; }
  virtual void LayOutOp(const OpProbe& probe, tp_op_layout& layout) const {}
  // The sink a capture window's trees pass through on their way from the
  // step slicer to `next` (its outputs): one of the set's, made anew for
  // each window and kept until the next one's, or `next` itself. Asked
  // before Wire, in the sets' order (the first set's sink is nearest the
  // outputs).
  virtual TraceSink* DecorateSlices(TraceSink* next) { return next; }
  // A capture window's fresh model and outputs (the first one at the start).
  virtual void Wire(const ModelWiring& wiring) {}
  // Each turn of the session's poll loop: input of the set's own (a socket).
  // `known_ns`: every process that became one of the run's before then has
  // been named to Follow (the fork events made by then are read).
  virtual void Poll(uint64_t known_ns) {}
  // What the set can tell of a live thread right now, for a flight
  // recorder's stall report: (what, text) notes appended to `notes`
  // (--sched: what it is waiting for; --python-stacks: its Python stack).
  virtual void ThreadNow(uint32_t pid, uint32_t tid, uint64_t now_ns,
                         std::vector<std::pair<std::string, std::string>>& notes) {}
  // The counts only this set knows, into a window's stats before it is written.
  virtual void FillStats(TraceStats& stats) {}
  // Files of the whole run (not per window), written at the end; false with
  // `error` set when one cannot be.
  virtual bool FinishRun(std::string* error) { return true; }
  // A line for the run's summary, or "".
  virtual std::string Summary(const TraceStats& stats) const { return ""; }
  // The run is over: the keeper is about to remove every link (a set may
  // say which go first), then has (a set gives back what it changed in the
  // processes because of them).
  virtual void BeforeRemoval() {}
  virtual void AfterRemoval() {}

 protected:
  ProbeSetContext context_;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_PROBE_SETS_PROBE_SET_H
