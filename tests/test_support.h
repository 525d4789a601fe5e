// What the end-to-end tests share: running torchprobe and the PyTorch
// fixture as child processes, and deciding when a tier must skip.
#ifndef TORCHPROBE_TESTS_TEST_SUPPORT_H
#define TORCHPROBE_TESTS_TEST_SUPPORT_H

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace torchprobe::test {

struct CommandResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
};

// Runs argv to completion (stdin from /dev/null), capturing both streams.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});

// Starts argv in the background, stdout to `stdout_path`; returns its pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& stdout_path);
// Waits for a spawned child; returns its exit code (128 + signal if killed).
// After 300 s the test fails, saying what each thread was doing, the child is
// killed and -1 returned.
int Wait(pid_t pid);

std::string TorchprobeBinary();   // $TORCHPROBE or build/torchprobe
std::string FixturePath(const std::string& name);  // build/fixtures/NAME, beside the binary
std::string CollectorPath();      // build/libtorchprobe_cupti.so, beside the binary
std::string Python();             // $PYTHON or /usr/bin/python3
std::string TrainScript();        // tests/fixtures/train.py
std::string Fixture(const std::string& name);  // tests/fixtures/NAME
std::string Golden(const std::string& name);   // tests/golden/NAME
// One of our JSON traces decoded by tests/fixtures/json_facts.py (KIND "et"
// or "chrome"): its lines split at tabs. A file that does not decode fails
// the test.
std::vector<std::vector<std::string>> JsonFacts(const std::string& kind, const std::string& path);
// `key value` lines (what the comparison fixtures print) by key.
std::map<std::string, std::string> Measures(const std::string& text);
std::string TraceProcessor();     // "" when ../shared/tools/trace_processor_shell is absent
// The libtorch_cpu of PyTorch 1.13 (host) and 2.6 (the root) that are here.
std::vector<std::string> LibtorchImages();
bool IsRoot();
bool HaveTorch();                 // Python() can import torch
// The PyTorch 2.x root of tools/torch2-root, "" when it is not usable (then
// Torch2RootMissing() says why, for GTEST_SKIP). Built by `make test`.
std::string Torch2Root();
std::string Torch2RootMissing();
// argv that runs `python3 SCRIPT ARGS...` in the root, with its own /proc in
// a private mount namespace; SCRIPT is a path inside the root. unshare, sh
// and chroot exec one another, so the pid spawned ends as python's.
std::vector<std::string> Torch2Python(const std::string& root, const std::string& script,
                                      const std::vector<std::string>& args);
// A fixture `script` taking READY STOP arguments, given to `check` with its
// argv, the host paths of READY and STOP and a file for its stdout: run by
// the host's Python(), then in the 2.x root (copied there as
// /tmp/torchprobe-<tag>-<pid>.py). Returns why the 2.x run was left out ("" if not).
using ReadyStopCheck = std::function<void(const std::vector<std::string>& argv, const std::string& ready,
                                          const std::string& stop, const std::string& out)>;
std::string WithReadyStopScript(const std::string& script, const std::string& tag, const ReadyStopCheck& check);

std::string MakeTempDir();
// Removes what MakeTempDir made, and the files in it.
void RemoveTempDir(const std::string& dir);
std::string ReadFile(const std::string& path);
bool FileExists(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);
// Names in `dir` (no . and ..).
std::vector<std::string> ListDir(const std::string& dir);
// Polls `done` up to `timeout_s`; true once it holds.
bool WaitUntil(const std::function<bool()>& done, double timeout_s);
// Polls for `path` up to `timeout_s`.
bool WaitForFile(const std::string& path, double timeout_s);

// Share of `want`'s per-key counts that `got` matches, per-key minimum
// (recall); swapped arguments give precision.
double CountAgreement(const std::map<std::string, double>& got, const std::map<std::string, double>& want);
// A line's cells between tabs (a fixture's profile output).
std::vector<std::string> SplitTabs(const std::string& line);

// Per-key counts from torchprobe (`got`) and from torch.profiler (`want`):
// one line "  KEY: torchprobe G, torch.profiler W" per key where they differ.
std::string CountDisagreements(const std::map<std::string, double>& got,
                               const std::map<std::string, double>& want);

}  // namespace torchprobe::test

#define TP_REQUIRE_ROOT_AND_TORCH()                                              \
  do {                                                                           \
    if (!::torchprobe::test::IsRoot()) GTEST_SKIP() << "needs root (BPF)";    \
    if (!::torchprobe::test::HaveTorch()) GTEST_SKIP() << "needs python3-torch"; \
  } while (0)

#endif  // TORCHPROBE_TESTS_TEST_SUPPORT_H

namespace torchprobe::test {
// Runs Perfetto's trace processor on `trace` with one SQL statement; returns
// the rows without the header, each split into cells with quotes removed
// (our values hold no commas). Callers check TraceProcessor() first. A
// failing tool gives one row with one cell that says so.
std::vector<std::vector<std::string>> QueryTrace(const std::string& trace, const std::string& sql);

// A path relative to the repository's root (`../shared/...` beside it).
std::string RepoPath(const std::string& relative);

// ../shared/validators/check-et-kineto (HTA, Chakra, PARAM) on an ET and
// Chrome JSON pair, its outputs under `workdir`; each step's line is
// "PASS step: ..." or other.
CommandResult CheckEtKineto(const std::string& et, const std::string& chrome, const std::string& workdir);
// It could not run the consumers (their Python packages are absent): the
// caller skips.
bool ValidatorsMissing(const CommandResult& check);
}  // namespace torchprobe::test
