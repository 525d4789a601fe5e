// Stop and toggle counters, and the bounded test pause; see the header.
#include "userspace/session/record_signals.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace torchprobe {
namespace {

volatile sig_atomic_t g_stops = 0;    // stop signals received
volatile sig_atomic_t g_toggles = 0;  // SIGUSR1s received: capture on/off
volatile sig_atomic_t g_dumps = 0;    // SIGUSR2s received: flight recorder dumps asked for

}  // namespace

void InstallRecordSignals() {
  struct sigaction action = {};
  action.sa_handler = [](int) { g_stops = g_stops + 1; };  // no SA_RESTART: poll() returns EINTR
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);
  struct sigaction toggle = action;
  toggle.sa_handler = [](int) { g_toggles = g_toggles + 1; };
  sigaction(SIGUSR1, &toggle, nullptr);
  struct sigaction dump = action;
  dump.sa_handler = [](int) { g_dumps = g_dumps + 1; };
  sigaction(SIGUSR2, &dump, nullptr);
}

int StopSignals() { return g_stops; }
int ToggleSignals() { return g_toggles; }
int DumpSignals() { return g_dumps; }

void TestPause(const char* point, bool quiet) {
  const char* wanted = std::getenv("TORCHPROBE_TEST_PAUSE");
  if (!wanted || std::strcmp(wanted, point) != 0) return;
  sigevent wake{};
  wake.sigev_notify = SIGEV_SIGNAL;
  wake.sigev_signo = SIGCONT;  // the kernel continues a stopped process before any thread runs
  timer_t timer;
  if (timer_create(CLOCK_MONOTONIC, &wake, &timer) != 0) return;  // no way back: no stop
  itimerspec after{};
  after.it_value.tv_sec = kTestPauseS;
  if (timer_settime(timer, 0, &after, nullptr) == 0) {
    if (!quiet)
      std::fprintf(stderr, "torchprobe: TORCHPROBE_TEST_PAUSE=%s: stopped here for a test, %d s at most\n", point,
                   kTestPauseS);
    kill(getpid(), SIGSTOP);
  }
  timer_delete(timer);
}

}  // namespace torchprobe
