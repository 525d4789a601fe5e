// Loading a library into a running process and calling one of its
// functions there: the one place torchprobe writes to a target's registers
// and memory, and only when the user asks (`record --inject-cupti`).
//
// With ptrace (x86-64 only): every thread is seized and gets a hardware
// breakpoint (debug registers, no int3 written) on the entries of
// `safe_points`, functions the process calls often from a state where it
// holds none of the loader's or malloc's locks (CUDA launch entries). The
// first thread to hit one is borrowed: the others have their breakpoints
// cleared and are let go; on the borrowed one its registers and whole
// FP/vector state are saved, then its errno (through __errno_location, in
// the thread), dlopen(library, RTLD_NOW), dlsym and function(argument) are
// called in it (each "returns" to address 0, whose fault ptrace catches),
// and everything is put back as it was, errno included, before it runs on.
// Signals that arrive meanwhile are passed through unchanged. What stays in
// the target: the library (dlopen's reference; a later dlopen of the same
// path gets the loaded copy) and whatever the function did; the dead stack
// below the thread's red zone held the strings. Not put back: dlerror's
// per-thread message (only a failed dlopen leaves one, read by our
// dlerror call), and a blocking call that the stop interrupted and that the
// kernel does not restart (epoll_wait, semop, ...) returns EINTR, as at any
// debugger's attach or SIGSTOP/SIGCONT.
//
// The tracer is a helper process (attach/detached_helper.h), not the
// caller: torchprobe killed at any step (SIGKILL, the OOM killer) leaves
// the helper to finish and let go. Every path ends with each thread's debug
// registers cleared, its registers put back and detached, within bounds,
// except a thread that cannot be stopped while it would be harmed by being
// let go running (armed, or borrowed with its registers not yet put back):
// it is inside the kernel (uninterruptible), and it stops for the pending
// interrupt before it runs a single instruction of its own, so the helper
// waits for that, however long it takes (it costs one sleeping process);
// exiting instead would detach it armed, and its next launch would kill the
// process. A thread that cannot be stopped but was never armed is let go by
// the helper's exit (a tracer's exit detaches its tracees and clears a
// pending interrupt), never left stopped. The caller has its answer before
// such a wait; SIGKILL of the helper itself is the one thing not covered.
#ifndef TORCHPROBE_ATTACH_INJECT_LIBRARY_H
#define TORCHPROBE_ATTACH_INJECT_LIBRARY_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "userspace/base/status.h"

namespace torchprobe {

// Where the helper is, for a test that stops there (InjectRequest::on_step).
enum class InjectStep {
  kStopped,    // every thread seized and stopped, no breakpoint set yet
  kArmed,      // the breakpoints set, the threads running: waiting for a safe point
  kInCall,     // the borrowed thread is running the first injected call (dlopen)
  kReleasing,  // the calls returned: the borrowed thread is about to be put back
};

struct InjectRequest {
  uint32_t pid = 0;
  std::vector<uint64_t> safe_points;  // function entries, at most 4 (the debug registers)
  std::string safe_point_what;        // what they are, for the timeout's message ("CUDA launch")
  std::string library;                // the path as the target opens it
  std::string function;               // extern "C", called as function(argument)
  std::string argument;               // a string, passed as const char*
  // The target's dynamic loader calls, found by the caller
  // (discover/remote_symbols.h, FindDynamicLoaderCalls); errno_location 0:
  // the borrowed thread's errno is not kept.
  uint64_t dlopen = 0, dlsym = 0, dlerror = 0, errno_location = 0;
  uint64_t safe_point_timeout_ns = 3'000'000'000;
  // Each call (errno, dlopen, dlsym, the function) gets this long; one
  // that has not returned is abandoned: its thread put back where it was
  // borrowed, safe only if the call held no lock. The collector's four
  // calls hold a thread 5-43 ms in all with the fake CUPTI (a loaded 2-core
  // VM; README: --inject-cupti); InjectResult::borrowed_ns is each
  // injection's own window.
  uint64_t call_timeout_ns = 10'000'000'000;
  // `library` is a copy made for this injection (a file named `copy_name`
  // in the directory `copy_dir_fd`): the helper removes it once dlopen has
  // run or will not, even when the caller died meanwhile.
  int copy_dir_fd = -1;
  std::string copy_name;
  // Tests only (torchprobe never sets it): called in the helper at each
  // step, which waits for it to return.
  std::function<void(InjectStep)> on_step;
};

struct InjectResult {
  uint32_t tid = 0;   // the thread that ran the calls
  int64_t value = 0;  // what the function returned (rax)
  uint64_t borrowed_ns = 0;  // how long the borrowed thread ran our calls (errno, dlopen, dlsym, function)
};

// An error (one line, naming the process) leaves the target as it was,
// without the library when it is returned before dlopen ran.
StatusOr<InjectResult> InjectLibrary(const InjectRequest& request);

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_INJECT_LIBRARY_H
