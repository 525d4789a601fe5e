// The agent's end-to-end fixture and helpers, shared by the agent's test
// files: an agent filtered to the test's own processes (--match-cmdline on
// a token unique to the test, since other sessions' PyTorch processes run
// on the same host), the training loop as its target, the output folder's
// index, and the metrics endpoint read as Prometheus text.
#ifndef TORCHPROBE_TESTS_AGENT_FIXTURE_H
#define TORCHPROBE_TESTS_AGENT_FIXTURE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_support.h"
#include "userspace/report/json_value.h"

namespace torchprobe::agent_test {

inline constexpr double kBound = 180;  // generous: a loaded 2-core machine, torch imports

inline uint64_t SizeOf(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// index.jsonl, parsed; a line that does not parse fails the test.
inline std::vector<JsonValue> ReadIndex(const std::string& dir) {
  std::vector<JsonValue> entries;
  std::istringstream lines(test::ReadFile(dir + "/index.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    JsonValue value;
    std::string error;
    EXPECT_TRUE(ParseJson(line, &value, &error)) << error << ": " << line;
    entries.push_back(value);
  }
  return entries;
}

inline std::string Str(const JsonValue& entry, const char* key) {
  const JsonValue* v = entry.Find(key);
  return v ? v->string : "";
}
inline uint64_t Num(const JsonValue& entry, const char* key) {
  const JsonValue* v = entry.Find(key);
  return v ? static_cast<uint64_t>(v->integer) : 0;
}

// The window files in `dir` (not the index, not .partial), their
// companions (.et.json, .kineto.json, a dump's .stall.txt and .stall.json) too.
inline std::set<std::string> WindowFiles(const std::string& dir) {
  std::set<std::string> files;
  for (const std::string& name : test::ListDir(dir))
    if (name.size() > 8 && (name.ends_with(".pftrace") || name.ends_with(".json") || name.ends_with(".stall.txt")))
      files.insert(name);
  return files;
}

// An index entry's companions, by name.
inline std::vector<std::string> Companions(const JsonValue& entry) {
  std::vector<std::string> names;
  if (const JsonValue* list = entry.Find("companions"))
    for (const JsonValue& item : list->items) names.push_back(item.string);
  return names;
}

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";
    dir_ = test::MakeTempDir();
    out_ = dir_ + "/out";
    token_ = "agent-test-" + std::to_string(getpid()) + "-" + std::to_string(counter_++);
  }
  void TearDown() override {
    if (dir_.empty()) return;
    test::WriteFile(dir_ + "/" + token_ + ".stop", "");
    for (pid_t pid : targets_) {
      kill(pid, SIGKILL);
      test::Wait(pid);
    }
    if (agent_ > 0) {
      kill(agent_, SIGKILL);
      test::Wait(agent_);
    }
    // The whole folder: the output, the plan cache, a second agent's output
    // (a folder was left in /tmp by every agent test).
    std::string ignored = test::RunCommand({"rm", "-rf", dir_}).err;
  }

  // Starts the agent on out_, its log (stderr) in dir_/agent.log.
  void StartAgent(std::vector<std::string> args) {
    std::vector<std::string> argv = {"sh", "-c", "exec \"$0\" \"$@\" 2>>\"" + dir_ + "/agent.log\"",
                                     test::TorchprobeBinary(), "agent", "-o", out_, "--socket", dir_ + "/agent.sock",
                                     "--scan", "0.3", "--match-cmdline", token_};
    argv.insert(argv.end(), args.begin(), args.end());
    size_t started = Starts();
    agent_ = test::Spawn(argv, dir_ + "/agent.out");
    ASSERT_TRUE(test::WaitUntil([&] { return Starts() > started; }, kBound)) << "agent did not start: " << Log();
  }
  std::string Log() { return test::ReadFile(dir_ + "/agent.log"); }
  // Agents started on this log so far (the line each prints once ready).
  size_t Starts() {
    std::string log = Log();
    size_t n = 0;
    for (size_t at = log.find("trigger socket"); at != std::string::npos; at = log.find("trigger socket", at + 1)) ++n;
    return n;
  }
  int StopAgent() {
    kill(agent_, SIGTERM);
    int code = test::Wait(agent_);
    agent_ = -1;
    return code;
  }

  // The training loop, its command line holding the token; waits until it runs.
  // `args`: more of train.py's options (--workers 2).
  pid_t StartTrain(const std::string& name, const std::vector<std::string>& env = {},
                   const std::vector<std::string>& args = {}) {
    std::vector<std::string> argv = {"env"};
    argv.insert(argv.end(), env.begin(), env.end());
    std::string ready = dir_ + "/" + token_ + "." + name + ".ready";
    for (const std::string& arg : {test::Python(), test::TrainScript(), std::string("--steps"), std::string("100000000"),
                                   std::string("--stop-file"), dir_ + "/" + token_ + ".stop",
                                   std::string("--ready-file"), ready})
      argv.push_back(arg);
    argv.insert(argv.end(), args.begin(), args.end());
    pid_t pid = test::Spawn(argv, dir_ + "/" + name + ".out");
    targets_.push_back(pid);
    EXPECT_TRUE(test::WaitForFile(ready, kBound)) << name << " never got ready";
    return pid;
  }

  // Index entries for `pid`.
  size_t WindowsOf(uint32_t pid) {
    size_t n = 0;
    for (const JsonValue& entry : ReadIndex(out_)) n += Num(entry, "pid") == pid;
    return n;
  }

  static inline int counter_ = 0;
  std::string dir_, out_, token_;
  pid_t agent_ = -1;
  std::vector<pid_t> targets_;
};

// The index lists exactly the window files present (with their
// companions), at their sizes.
inline void ExpectIndexMatchesFiles(const std::string& out) {
  std::set<std::string> indexed;
  for (const JsonValue& entry : ReadIndex(out)) {
    indexed.insert(Str(entry, "file"));
    uint64_t bytes = SizeOf(out + "/" + Str(entry, "file"));
    for (const std::string& companion : Companions(entry)) {
      indexed.insert(companion);
      bytes += SizeOf(out + "/" + companion);
    }
    EXPECT_EQ(Num(entry, "bytes"), bytes) << Str(entry, "file");
  }
  EXPECT_EQ(indexed, WindowFiles(out));
}

// GET / on HOST:PORT; the body.
inline std::string HttpGet(const std::string& address) {
  size_t colon = address.rfind(':');
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  std::string request = "GET /metrics HTTP/1.0\r\n\r\n", response;
  EXPECT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) response.append(buffer, static_cast<size_t>(n));
  close(fd);
  size_t body = response.find("\r\n\r\n");
  EXPECT_EQ(response.rfind("HTTP/1.0 200", 0), 0u) << response;
  return body == std::string::npos ? "" : response.substr(body + 4);
}

// Prometheus text exposition, checked line by line: every sample's metric has
// its TYPE line first and its samples together, names and labels are valid
// (label values quoted, with \\, \" and \n escaped), values are numbers.
// Name (with its labels as written, when it has any) -> value.
inline std::map<std::string, double> ParseExposition(const std::string& text) {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  std::set<std::string> ended;  // families whose samples are over
  std::string current;
  static const std::regex kType(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  static const std::regex kHelp(R"(^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*$)");
  static const std::regex kSample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\})? ([-+0-9.eE]+|NaN|[+-]Inf)$)");
  std::istringstream lines(text);
  std::smatch match;
  for (std::string line; std::getline(lines, line);) {
    if (std::regex_match(line, match, kType)) {
      EXPECT_FALSE(types.count(match[1])) << "two TYPE lines for " << match[1];
      types[match[1]] = match[2];
    } else if (std::regex_match(line, kHelp)) {
    } else if (std::regex_match(line, match, kSample)) {
      std::string name = match[1];
      EXPECT_TRUE(types.count(name)) << "no TYPE before " << line;
      if (name != current) {
        EXPECT_FALSE(ended.count(name)) << name << "'s samples are not together";
        if (!current.empty()) ended.insert(current);
        current = name;
      }
      if (types[name] == "counter") {
        EXPECT_TRUE(name.ends_with("_total")) << line;
      }
      samples[name + std::string(match[2])] = std::stod(match[3]);
    } else {
      ADD_FAILURE() << "not exposition text: '" << line << "'";
    }
  }
  EXPECT_TRUE(text.ends_with("\n"));
  return samples;
}

// The counters on the agent's metrics port, by name.
inline std::map<std::string, double> MetricsNow(const std::string& log) {
  std::smatch match;
  if (!std::regex_search(log, match, std::regex(R"(metrics on ([0-9.]+:[0-9]+))"))) return {};
  return ParseExposition(HttpGet(match[1]));
}

}  // namespace torchprobe::agent_test

#endif  // TORCHPROBE_TESTS_AGENT_FIXTURE_H
