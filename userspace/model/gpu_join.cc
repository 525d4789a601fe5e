// Joining CUPTI's activities to our CPU calls; see the header.
#include "userspace/model/gpu_join.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace torchprobe {

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
  Launch& launch = launches_[{pid, tid}][begin_ns];
  launch.correlation = next_correlation_++;
  launch.call = std::string(call);
  launch.op = std::move(op);
  return launch.correlation;
}

void GpuJoin::OnApiCall(const GpuApiCall& api) {
  ++api_calls_;
  // A runtime call and the driver calls inside it share CUPTI's correlation
  // id: the outermost (earliest) one is the call our probe saw first.
  auto [it, added] = apis_.try_emplace({api.pid, api.correlation}, api);
  if (!added && api.start_ns < it->second.start_ns) it->second = api;
}

void GpuJoin::OnActivity(GpuActivity activity) { activities_.push_back(std::move(activity)); }

GpuJoin::Launch* GpuJoin::FindLaunch(const GpuApiCall& api) {
  if (api.tid == 0) return nullptr;
  auto thread = launches_.find({api.pid, api.tid});
  if (thread == launches_.end()) return nullptr;
  auto it = thread->second.upper_bound(api.start_ns);
  if (it == thread->second.begin()) return nullptr;
  --it;
  if (api.start_ns - it->first > kMaxEntryToApiNs) return nullptr;
  Launch& launch = it->second;
  // An entry already joined to another API call is not this one's: our
  // entry of this call was lost.
  if (launch.cupti_correlation != 0 && launch.cupti_correlation != api.correlation) return nullptr;
  launch.cupti_correlation = api.correlation;
  return &launch;
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
    Launch* launch = api == apis_.end() ? nullptr : FindLaunch(api->second);
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
  activities_ = std::move(held);
  // What they were joined with is done with too (a capture window's next
  // activities come with their own API calls and launches).
  std::erase_if(apis_, [until_ns](const auto& entry) { return entry.second.start_ns <= until_ns; });
  for (auto& [thread, launches] : launches_) launches.erase(launches.begin(), launches.upper_bound(until_ns));
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
