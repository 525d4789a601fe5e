// Child-process plumbing for the end-to-end tests; see the header.
#include "tests/test_support.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
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

std::string RepoPath(const std::string& relative) {
  // Tests run from the repo root (make test); fall back to this file's place.
  if (access(relative.c_str(), F_OK) == 0) return relative;
  std::string here = __FILE__;
  return here.substr(0, here.rfind("/tests/")) + "/" + relative;
}

}  // namespace

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

int Wait(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return ExitCode(status);
}

std::string TorchprobeBinary() {
  const char* env = std::getenv("TORCHPROBE");
  return env ? env : RepoPath("build/torchprobe");
}

std::string Python() {
  const char* env = std::getenv("PYTHON");
  return env ? env : "/usr/bin/python3";
}

std::string TrainScript() { return RepoPath("tests/fixtures/train.py"); }

std::string TraceProcessor() {
  const char* env = std::getenv("TRACE_PROCESSOR");
  std::string path = env ? env : RepoPath("../shared/tools/trace_processor_shell");
  return access(path.c_str(), X_OK) == 0 ? path : "";
}

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

bool WaitForFile(const std::string& path, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (FileExists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
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
