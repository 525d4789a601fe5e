// Child-process plumbing for the end-to-end tests; see the header.
#include "tests/test_support.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <cstdlib>
#include <fstream>
#include <set>
#include <algorithm>
#include <sstream>
#include <thread>

namespace torchprobe::test {
namespace {

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (const std::string& s : strings) result.push_back(const_cast<char*>(s.c_str()));
  result.push_back(nullptr);
  return result;
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::string RepoPath(const std::string& relative) {
  // Tests run from the repo root (make test); fall back to this file's place.
  if (access(relative.c_str(), F_OK) == 0) return relative;
  std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/" + relative;
}

CommandResult RunCommand(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::string dir = MakeTempDir();
  std::string out_path = dir + "/out", err_path = dir + "/err";
  pid_t pid = fork();
  if (pid == 0) {
    int in = open("/dev/null", O_RDONLY);
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args = CStrings(argv);
    execvp(args[0], args.data());
    _exit(127);
  }
  CommandResult result;
  result.exit_code = Wait(pid);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  rmdir(dir.c_str());
  return result;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& stdout_path) {
  pid_t pid = fork();
  if (pid == 0) {
    int in = open("/dev/null", O_RDONLY);
    int out = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(in, 0);
    dup2(out, 1);
    std::vector<char*> args = CStrings(argv);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

namespace {
// Each thread's state, kernel wait channel and tracer: what a hang looked like.
std::string DescribeThreads(pid_t pid) {
  std::string task = "/proc/" + std::to_string(pid) + "/task";
  std::string out;
  for (const std::string& tid : ListDir(task)) {
    std::string dir = task + "/" + tid, stat = ReadFile(dir + "/stat"), tracer = "?";
    std::istringstream status(ReadFile(dir + "/status"));
    for (std::string line; std::getline(status, line);)
      if (line.rfind("TracerPid:", 0) == 0) tracer = line.substr(10);
    size_t paren = stat.rfind(')');
    out += " [tid " + tid + " state " + (paren == std::string::npos ? "?" : stat.substr(paren + 2, 1)) +
           " wchan " + ReadFile(dir + "/wchan") + " tracer" + tracer + "]";
  }
  return out;
}
}  // namespace

int Wait(pid_t pid) {
  // Bounded, so that a hang fails its test instead of stalling the suite.
  constexpr auto kLimit = std::chrono::seconds(300);
  auto deadline = std::chrono::steady_clock::now() + kLimit;
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return ExitCode(status);
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "pid " << pid << " still running after " << kLimit.count() << " s, killed:"
                << DescribeThreads(pid);
  kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return -1;
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string TorchprobeBinary() {
  const char* env = std::getenv("TORCHPROBE");
  return env ? env : RepoPath("build/torchprobe");
}

std::string FixturePath(const std::string& name) {
  std::string binary = TorchprobeBinary();
  return binary.substr(0, binary.rfind('/')) + "/fixtures/" + name;
}

std::string CollectorPath() {
  std::string binary = TorchprobeBinary();
  return binary.substr(0, binary.rfind('/')) + "/libtorchprobe_cupti.so";
}

std::string Python() {
  const char* env = std::getenv("PYTHON");
  return env ? env : "/usr/bin/python3";
}

std::string TrainScript() { return RepoPath("tests/fixtures/train.py"); }

namespace {
std::string Torch2RootPath() {
  CommandResult r = RunCommand({RepoPath("tools/torch2-root"), "--print-path"});
  return r.out.substr(0, r.out.find('\n'));
}
}  // namespace

std::string Torch2Root() {
  static const std::string usable =
      RunCommand({RepoPath("tools/torch2-root"), "--check"}).exit_code == 0 ? Torch2RootPath() : "";
  return usable;
}

std::string Torch2RootMissing() {
  return "no PyTorch 2.x root at " + Torch2RootPath() +
         " (tools/torch2-root builds it; make test does unless TORCH2_ROOT=skip)";
}

std::vector<std::string> Torch2Python(const std::string& root, const std::string& script,
                                      const std::vector<std::string>& args) {
  std::string command = "mount -t proc proc \"$0/proc\" && exec chroot \"$0\" python3 \"$@\"";
  std::vector<std::string> argv = {"unshare", "-m", "sh", "-c", command, root, script};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::string WithReadyStopScript(const std::string& script, const std::string& tag, const ReadyStopCheck& check) {
  std::string dir = MakeTempDir();
  check({Python(), script, dir + "/ready", dir + "/stop"}, dir + "/ready", dir + "/stop", dir + "/out");
  std::string root = Torch2Root();
  std::string name = "/tmp/torchprobe-" + tag + "-" + std::to_string(getpid());
  if (!root.empty() && RunCommand({"cp", script, root + name + ".py"}).exit_code == 0)
    check(Torch2Python(root, name + ".py", {name + ".ready", name + ".stop"}), root + name + ".ready",
          root + name + ".stop", dir + "/out2");
  for (const char* suffix : {".py", ".ready", ".stop"}) unlink((root + name + suffix).c_str());
  RemoveTempDir(dir);
  return root.empty() ? Torch2RootMissing() : "";
}

std::map<std::string, std::string> Measures(const std::string& text) {
  std::map<std::string, std::string> m;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t space = line.find(' ');
    if (space != std::string::npos) m[line.substr(0, space)] = line.substr(space + 1);
  }
  return m;
}

std::string TraceProcessor() {
  const char* env = std::getenv("TRACE_PROCESSOR");
  std::string path = env ? env : RepoPath("../shared/tools/trace_processor_shell");
  return access(path.c_str(), X_OK) == 0 ? path : "";
}

CommandResult CheckEtKineto(const std::string& et, const std::string& chrome, const std::string& workdir) {
  return RunCommand({RepoPath("../shared/validators/check-et-kineto"), et, chrome, "--workdir", workdir});
}

bool ValidatorsMissing(const CommandResult& check) { return check.out.find("FAIL deps") != std::string::npos; }

bool IsRoot() { return geteuid() == 0; }

bool HaveTorch() {
  static const bool have = RunCommand({Python(), "-c", "import torch"}).exit_code == 0;
  return have;
}

std::string MakeTempDir() {
  char tmpl[] = "/tmp/torchprobe-test-XXXXXX";
  return mkdtemp(tmpl);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool FileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
  }
  return names;
}

std::string Fixture(const std::string& name) { return RepoPath("tests/fixtures/" + name); }
std::string Golden(const std::string& name) { return RepoPath("tests/golden/" + name); }

std::vector<std::vector<std::string>> JsonFacts(const std::string& kind, const std::string& path) {
  CommandResult r = RunCommand({Python(), Fixture("json_facts.py"), kind, path});
  EXPECT_EQ(r.exit_code, 0) << path << " does not decode: " << r.err;
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cells;
    size_t start = 0;
    for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
      cells.push_back(line.substr(start, tab - start));
    cells.push_back(line.substr(start));  // kept when empty: "stat attach_mode "
    rows.push_back(cells);
  }
  return rows;
}

bool WaitUntil(const std::function<bool()>& done, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

bool WaitForFile(const std::string& path, double timeout_s) {
  return WaitUntil([&] { return FileExists(path); }, timeout_s);
}

}  // namespace torchprobe::test

namespace torchprobe::test {

std::vector<std::vector<std::string>> QueryTrace(const std::string& trace, const std::string& sql) {
  CommandResult r = RunCommand({TraceProcessor(), "query", trace, sql});
  std::vector<std::vector<std::string>> rows;
  if (r.exit_code != 0) return {{"trace_processor failed: " + r.err}};
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) {
    std::vector<std::string> row;
    std::istringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) {
      if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"')
        cell = cell.substr(1, cell.size() - 2);
      row.push_back(cell);
    }
    rows.push_back(row);
  }
  return rows;
}

std::vector<std::string> LibtorchImages() {
  std::vector<std::string> libs;
  for (const char* lib : {"/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13",
                          "/var/cache/torchprobe/trixie-torch/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.2.6"})
    if (FileExists(lib)) libs.push_back(lib);
  return libs;
}

double CountAgreement(const std::map<std::string, double>& got, const std::map<std::string, double>& want) {
  double matched = 0, total = 0;
  for (const auto& [key, n] : want) {
    auto it = got.find(key);
    matched += std::min(n, it == got.end() ? 0.0 : it->second);
    total += n;
  }
  return total > 0 ? matched / total : 0;
}

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream cut(line);
  for (std::string cell; std::getline(cut, cell, '\t');) cells.push_back(cell);
  return cells;
}

std::string CountDisagreements(const std::map<std::string, double>& got,
                               const std::map<std::string, double>& want) {
  std::ostringstream out;
  std::set<std::string> keys;
  for (const auto& [k, n] : got) keys.insert(k);
  for (const auto& [k, n] : want) keys.insert(k);
  for (const std::string& k : keys) {
    double g = got.count(k) ? got.at(k) : 0, w = want.count(k) ? want.at(k) : 0;
    if (g != w) out << "  " << k << ": torchprobe " << g << ", torch.profiler " << w << "\n";
  }
  return out.str();
}

void RemoveTempDir(const std::string& dir) {
  for (const std::string& name : ListDir(dir)) unlink((dir + "/" + name).c_str());
  rmdir(dir.c_str());
}

}  // namespace torchprobe::test
