// The signals a record run answers, counted by their handlers and read by
// its loop: SIGINT, SIGTERM and SIGHUP stop it, SIGUSR1 turns capture on
// or off, SIGUSR2 asks a flight recorder for a dump. And the test hook that
// stops it at a named point.
#ifndef TORCHPROBE_SESSION_RECORD_SIGNALS_H
#define TORCHPROBE_SESSION_RECORD_SIGNALS_H

namespace torchprobe {

// Installed once, before anything is attached; no SA_RESTART, so a poll()
// under way returns EINTR.
void InstallRecordSignals();
int StopSignals();    // stop signals received so far
int ToggleSignals();  // SIGUSR1s received so far
int DumpSignals();    // SIGUSR2s received so far

// Test hook: TORCHPROBE_TEST_PAUSE=<point> stops torchprobe at `point`
// (SIGSTOP to itself) so a test can change the world under it, e.g. kill
// the target between planning and attaching. An installed torchprobe
// honours it too, so it is made harmless: said on stderr (unless `quiet`),
// and bounded: a timer sends SIGCONT after kTestPauseS, so a forgotten
// variable costs a run that long, never a torchprobe stopped for good with
// its probes live. A test acts within that.
inline constexpr int kTestPauseS = 10;
void TestPause(const char* point, bool quiet);

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_RECORD_SIGNALS_H
