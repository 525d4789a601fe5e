// Joining CUPTI's activities to our CPU calls; see the header.
#include "userspace/model/gpu_join.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <utility>

namespace torchprobe {

// A million activities (a few hundred bytes each with their names: a few
// hundred MB) is a few minutes of a busy training loop: a whole-run trace
// longer than that is cut there, and says so; capture windows (--steps,
// --every) hand theirs over at each window's end. API calls and our
// launches, held as long, get the same bound.
const size_t GpuJoin::kMaxHeld = 1 << 20;

namespace {

// A CUPTI API call began this long after our entry of it, at most: a first
// launch may load its module lazily, but not for longer than this.
constexpr uint64_t kMaxEntryToApiNs = 10'000'000'000;

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

bool GpuJoin::MakesGpuWork(std::string_view call) {
  for (std::string_view prefix : {"cudaLaunch", "cuLaunch", "cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset",
                                  "cudaGraphLaunch", "cuGraphLaunch", "nccl"})
    if (StartsWith(call, prefix)) return true;
  return false;
}

uint64_t GpuJoin::OnCpuCall(uint32_t pid, uint32_t tid, uint64_t begin_ns, std::string_view call, std::string op) {
  if (!MakesGpuWork(call)) return 0;
  // Inside another such call (the driver's cuLaunchKernel in cudaLaunchKernel,
  // a kernel launch inside ncclAllReduce): the outer call is the launch,
  // and its own entry is the one CUPTI's API record joins to.
  if (MakesGpuWork(op)) return 0;
  auto& thread = launches_[{pid, tid}];
  if (!thread.count(begin_ns)) {
    if (launch_count_ >= max_held_) {
      ++over_bound_;
      return 0;
    }
    ++launch_count_;
  }
  Launch& launch = thread[begin_ns];
  launch.correlation = next_correlation_++;
  launch.call = std::string(call);
  launch.op = std::move(op);
  return launch.correlation;
}

void GpuJoin::OnApiCall(const GpuApiCall& api) {
  ++api_calls_;
  // A runtime call and the driver calls inside it share CUPTI's correlation
  // id: the outermost (earliest) one is the call our probe saw first.
  auto it = apis_.find({api.pid, api.correlation});
  if (it != apis_.end()) {
    if (api.start_ns < it->second.start_ns) it->second = api;
  } else if (apis_.size() >= max_held_) {
    ++over_bound_;
  } else {
    apis_.emplace(std::make_pair(api.pid, api.correlation), api);
  }
}

void GpuJoin::OnActivity(GpuActivity activity) {
  if (activities_.size() >= max_held_) {
    ++over_bound_;
    return;
  }
  activities_.push_back(std::move(activity));
}

GpuJoin::Launch* GpuJoin::MatchLaunch(std::map<uint64_t, Launch>& entries, const GpuApiCall& api,
                                      uint64_t previous_end) {
  auto free = [&api](const Launch& launch) {
    return launch.cupti_correlation == 0 || launch.cupti_correlation == api.correlation;
  };
  // Our probe on the very function CUPTI recorded fired just before CUPTI's
  // start: the latest entry at or before it, after the thread's previous call.
  auto it = entries.upper_bound(api.start_ns);
  if (it != entries.begin()) {
    auto before = std::prev(it);
    if (before->first > previous_end && api.start_ns - before->first <= kMaxEntryToApiNs && free(before->second))
      return &before->second;
  }
  // A runtime call made through a copy of the runtime we do not probe
  // (cuBLAS links its own: cudaLaunchKernelExC): our entry is of the
  // driver call inside it.
  for (; it != entries.end() && it->first <= api.end_ns; ++it)
    if (free(it->second)) return &it->second;
  return nullptr;
}

std::map<std::pair<uint32_t, uint32_t>, GpuJoin::Launch*> GpuJoin::JoinApiCalls() {
  // The API calls that made the activities, by thread, in the order made:
  // each call's entry lies after the thread's previous call, whatever
  // order the GPU ran their work in.
  std::map<std::pair<uint32_t, uint32_t>, std::vector<const GpuApiCall*>> by_thread;
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (const GpuActivity& a : activities_) {
    auto api = apis_.find({a.pid, a.cupti_correlation});
    if (api == apis_.end() || api->second.tid == 0 || !seen.insert(api->first).second) continue;
    by_thread[{a.pid, api->second.tid}].push_back(&api->second);
  }
  std::map<std::pair<uint32_t, uint32_t>, Launch*> joined;  // (pid, CUPTI correlation) -> our launch
  for (auto& [thread, calls] : by_thread) {
    auto entries = launches_.find(thread);
    if (entries == launches_.end()) continue;
    std::sort(calls.begin(), calls.end(),
              [](const GpuApiCall* a, const GpuApiCall* b) { return a->start_ns < b->start_ns; });
    uint64_t previous_end = 0;
    for (const GpuApiCall* call : calls) {
      if (Launch* launch = MatchLaunch(entries->second, *call, previous_end)) {
        launch->cupti_correlation = call->correlation;
        joined[{call->pid, call->correlation}] = launch;
      }
      previous_end = std::max(previous_end, call->end_ns);
    }
  }
  return joined;
}

void GpuJoin::Emit(GpuSink* sink, TraceStats* stats, uint64_t until_ns) {
  // Activities of calls made after `until_ns` wait for the next Emit (the
  // next capture window), with their API calls.
  auto called_at = [this](const GpuActivity& a) {
    auto api = apis_.find({a.pid, a.cupti_correlation});
    return api != apis_.end() ? api->second.start_ns : a.start_ns;
  };
  auto later = std::stable_partition(activities_.begin(), activities_.end(),
                                     [&](const GpuActivity& a) { return called_at(a) <= until_ns; });
  std::vector<GpuActivity> held(std::make_move_iterator(later), std::make_move_iterator(activities_.end()));
  activities_.erase(later, activities_.end());
  stats->gpu_after_stop += held.size();
  std::sort(activities_.begin(), activities_.end(), [](const GpuActivity& a, const GpuActivity& b) {
    return std::tie(a.pid, a.device, a.stream, a.start_ns, a.end_ns) <
           std::tie(b.pid, b.device, b.stream, b.start_ns, b.end_ns);
  });
  std::map<std::pair<uint32_t, uint32_t>, Launch*> joined = JoinApiCalls();
  std::map<uint64_t, bool> launched;  // correlations whose first activity went out
  const GpuActivity* previous = nullptr;
  for (GpuActivity& a : activities_) {
    bool same_stream = previous && previous->pid == a.pid && previous->device == a.device &&
                       previous->stream == a.stream;
    if (same_stream && a.start_ns < previous->end_ns) {  // one stream runs one thing at a time
      a.start_ns = previous->end_ns;
      a.clamped = true;
      ++stats->gpu_clamped;
    }
    if (a.end_ns < a.start_ns) a.end_ns = a.start_ns;
    previous = &a;
    auto api = apis_.find({a.pid, a.cupti_correlation});
    auto match = joined.find({a.pid, a.cupti_correlation});
    Launch* launch = match == joined.end() ? nullptr : match->second;
    if (launch) {
      a.correlation = launch->correlation;
      a.first_of_launch = !launched[launch->correlation];
      launched[launch->correlation] = true;
      a.launch_tid = api->second.tid;
      a.launch_call = launch->call;
      a.op = launch->op;
    } else {
      ++stats->gpu_unjoined;
    }
    ++stats->gpu_activities;
    if (sink) sink->AddGpuActivity(a);
  }
  stats->gpu_api_calls += api_calls_;
  api_calls_ = 0;
  stats->gpu_queue_full += over_bound_;
  over_bound_ = 0;
  activities_ = std::move(held);
  // What they were joined with is done with too (a capture window's next
  // activities come with their own API calls and launches).
  std::erase_if(apis_, [until_ns](const auto& entry) { return entry.second.start_ns <= until_ns; });
  for (auto& [thread, launches] : launches_) {
    auto end = launches.upper_bound(until_ns);
    launch_count_ -= static_cast<size_t>(std::distance(launches.begin(), end));
    launches.erase(launches.begin(), end);
  }
  std::erase_if(launches_, [](const auto& entry) { return entry.second.empty(); });
}

size_t GpuJoin::ForgetBefore(uint32_t pid, uint64_t since_ns) {
  auto before = [&](const GpuActivity& a) {
    if (a.pid != pid) return false;
    auto api = apis_.find({a.pid, a.cupti_correlation});
    return (api != apis_.end() ? api->second.start_ns : a.start_ns) < since_ns;
  };
  size_t forgotten = std::erase_if(activities_, before);
  std::erase_if(apis_, [&](const auto& entry) { return entry.first.first == pid && entry.second.start_ns < since_ns; });
  return forgotten;
}

}  // namespace torchprobe
