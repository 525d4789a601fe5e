// Reading stall reports together; see the header.
#include "userspace/report/stall_analysis.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "userspace/report/json_value.h"

namespace torchprobe {
namespace {

struct Open {
  std::string name;
  uint64_t begin_ns = 0;
  uint64_t seq = 0;
};

struct Thread {
  uint64_t tid = 0;
  std::string name;
  std::vector<Open> open;
  uint64_t last_closed_end_ns = 0;
  std::vector<std::pair<std::string, std::string>> now;  // the dump's notes: "state", "python"
};

struct Process {
  std::string host, file;
  uint64_t pid = 0;
  int64_t rank = -1;
  std::string name, ended;
  uint64_t dump_ns = 0, dump_unix_ns = 0;
  std::vector<Thread> threads;
  struct Group {
    std::string address, last_op;
    int64_t size = 0;
    uint64_t entered = 0, last_begin_ns = 0;
  };
  std::vector<Group> groups;
};

uint64_t U(const JsonValue& object, const char* key) {
  const JsonValue* value = object.Find(key);
  return value && value->kind == JsonValue::kNumber && value->integer > 0 ? static_cast<uint64_t>(value->integer) : 0;
}
int64_t I(const JsonValue& object, const char* key, int64_t otherwise) {
  const JsonValue* value = object.Find(key);
  return value && value->kind == JsonValue::kNumber ? value->integer : otherwise;
}
std::string S(const JsonValue& object, const char* key) {
  const JsonValue* value = object.Find(key);
  return value && value->kind == JsonValue::kString ? value->string : "";
}
const std::vector<JsonValue>& Items(const JsonValue& object, const char* key) {
  static const std::vector<JsonValue> kNone;
  const JsonValue* value = object.Find(key);
  return value && value->kind == JsonValue::kArray ? value->items : kNone;
}

std::string Ago(const Process& p, uint64_t ns) {
  char text[48];
  std::snprintf(text, sizeof text, "%.3f s before its dump", p.dump_ns > ns ? (p.dump_ns - ns) / 1e9 : 0.0);
  return text;
}

std::string Who(const Process& p) {
  std::string who = p.rank >= 0 ? "rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.pid) + ")"
                                : "pid " + std::to_string(p.pid);
  return who + (p.host.empty() ? "" : " on " + p.host);
}

// What a process' threads are in: each thread's innermost open slice, or
// where none is open, its main thread's last op end.
std::string Doing(const Process& p) {
  std::string text;
  for (const Thread& thread : p.threads) {
    if (thread.open.empty()) continue;
    const Open& innermost = thread.open.back();
    text += std::string(text.empty() ? "" : "; ") + "thread " + std::to_string(thread.tid) + " in " + innermost.name +
            " since " + Ago(p, innermost.begin_ns);
  }
  if (!text.empty()) return text;
  for (const Thread& thread : p.threads)
    if (thread.tid == p.pid) {
      std::string now;
      for (const auto& [what, note] : thread.now) now += (now.empty() ? "" : "; ") + what + ": " + note;
      return "its threads are in no op; its main thread's last op ended " +
             (thread.last_closed_end_ns ? Ago(p, thread.last_closed_end_ns) : std::string("before the dump's events")) +
             (now.empty() ? " (outside PyTorch: Python code, a sleep, I/O; record with --python-stacks and --sched "
                            "to see where)"
                          : ", now " + now);
    }
  return "its threads are in no op";
}

}  // namespace

bool IsStallReport(const std::string& path) {
  static const std::string kSuffix = ".stall.json";
  return path.size() > kSuffix.size() && path.compare(path.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

bool AnalyzeStalls(const std::vector<std::string>& paths, std::string* out, std::string* error) {
  std::map<std::pair<std::string, uint64_t>, Process> processes;  // (host, pid): from its newest dump
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      *error = "cannot read " + path;
      return false;
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    JsonValue root;
    std::string parse_error;
    if (!ParseJson(buffer.str(), &root, &parse_error) || root.kind != JsonValue::kObject || !root.Find("processes")) {
      *error = path + " is not a torchprobe stall report" + (parse_error.empty() ? "" : ": " + parse_error);
      return false;
    }
    for (const JsonValue& entry : Items(root, "processes")) {
      Process p;
      p.host = S(root, "host");
      p.file = path;
      p.dump_ns = U(root, "dump_ns");
      p.dump_unix_ns = U(root, "dump_unix_ns");
      p.pid = U(entry, "pid");
      p.rank = I(entry, "rank", -1);
      p.name = S(entry, "name");
      p.ended = S(entry, "ended");
      for (const JsonValue& t : Items(entry, "threads")) {
        Thread thread{U(t, "tid"), S(t, "name"), {}, U(t, "last_closed_end_ns"), {}};
        for (const JsonValue& o : Items(t, "open")) thread.open.push_back({S(o, "name"), U(o, "begin_ns"), U(o, "collective_seq")});
        if (const JsonValue* now = t.Find("now"))
          for (const auto& [what, note] : now->members)
            if (note.kind == JsonValue::kString) thread.now.emplace_back(what, note.string);
        p.threads.push_back(std::move(thread));
      }
      for (const JsonValue& g : Items(entry, "groups"))
        p.groups.push_back({S(g, "group"), S(g, "last_op"), I(g, "group_size", 0), U(g, "entered"), U(g, "last_begin_ns")});
      Process& known = processes[{p.host, p.pid}];
      if (known.pid == 0 || p.dump_unix_ns > known.dump_unix_ns) known = std::move(p);
    }
  }
  std::string text = "Stall analysis of " + std::to_string(paths.size()) + (paths.size() == 1 ? " dump" : " dumps") + ", " +
                     std::to_string(processes.size()) + (processes.size() == 1 ? " process" : " processes") + ":\n";
  for (const auto& [key, p] : processes)
    text += "  " + Who(p) + " " + p.name + (p.ended.empty() ? "" : ", " + p.ended) + ": " + Doing(p) + "\n";
  // Per group size: the newest collective any rank entered, who did not.
  std::map<int64_t, std::vector<std::pair<const Process*, const Process::Group*>>> by_size;
  for (const auto& [key, p] : processes)
    for (const Process::Group& group : p.groups) by_size[group.size].push_back({&p, &group});
  if (by_size.empty()) text += "No collective was seen: nothing to compare across ranks.\n";
  for (const auto& [size, members] : by_size) {
    uint64_t newest = 0;
    for (const auto& [p, group] : members) newest = std::max(newest, group->entered);
    std::vector<std::string> lines;
    for (const auto& [p, group] : members) {
      if (group->entered == newest) {
        std::string still;
        for (const Thread& thread : p->threads)
          for (const Open& open : thread.open)
            if (open.begin_ns >= group->last_begin_ns)
              still += (still.empty() ? "" : ", ") + open.name + " on thread " + std::to_string(thread.tid);
        lines.push_back("  " + Who(*p) + " entered collective #" + std::to_string(newest) + " (" + group->last_op +
                        ") " + Ago(*p, group->last_begin_ns) +
                        (still.empty() ? "; no op of it is open at the dump" : "; still in " + still));
      } else {
        lines.push_back("  " + Who(*p) + " never entered collective #" + std::to_string(newest) + ": its last was #" +
                        std::to_string(group->entered) + " (" + group->last_op + ") " + Ago(*p, group->last_begin_ns) +
                        "; " + Doing(*p));
      }
    }
    bool all_in = std::all_of(members.begin(), members.end(), [&](const auto& m) { return m.second->entered == newest; });
    text += "Process groups of " + std::to_string(size) + " (" + std::to_string(members.size()) +
            " ranks seen; collectives counted per group since each recorder attached):\n";
    if (all_in && members.size() > 1)
      text += "  every rank seen entered collective #" + std::to_string(newest) + ": none is missing from it\n";
    for (const std::string& line : lines) text += line + "\n";
    if (static_cast<int64_t>(members.size()) < size)
      text += "  " + std::to_string(size - static_cast<int64_t>(members.size())) +
              " ranks of the group are in no dump given: their hosts' dumps would say what they did\n";
  }
  *out = text;
  return true;
}

}  // namespace torchprobe
