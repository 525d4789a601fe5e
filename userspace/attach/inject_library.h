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
// FP/vector state are saved, then dlopen(library, RTLD_NOW), dlsym and
// function(argument) are called in it (each "returns" to address 0, whose
// fault ptrace catches), and everything is put back as it was before it
// runs on. Signals that arrive meanwhile are passed through unchanged. On
// every failure path the registers, debug registers and tracing are undone
// the same way. What stays in the target: the library (dlopen's reference;
// a later dlopen of the same path gets the loaded copy) and whatever the
// function did; the dead stack below the thread's red zone held the strings.
#ifndef TORCHPROBE_ATTACH_INJECT_LIBRARY_H
#define TORCHPROBE_ATTACH_INJECT_LIBRARY_H

#include <cstdint>
#include <string>
#include <vector>

#include "userspace/status.h"

namespace torchprobe {

struct InjectRequest {
  uint32_t pid = 0;
  std::vector<uint64_t> safe_points;  // function entries, at most 4 (the debug registers)
  std::string safe_point_what;        // what they are, for the timeout's message ("CUDA launch")
  std::string library;                // the path as the target opens it
  std::string function;               // extern "C", called as function(argument)
  std::string argument;               // a string, passed as const char*
  uint64_t safe_point_timeout_ns = 3'000'000'000;
  uint64_t call_timeout_ns = 10'000'000'000;
};

struct InjectResult {
  uint32_t tid = 0;   // the thread that ran the calls
  int64_t value = 0;  // what the function returned (rax)
};

// An error (one line, naming the process) leaves the target as it was,
// without the library when it is returned before dlopen ran.
StatusOr<InjectResult> InjectLibrary(const InjectRequest& request);

}  // namespace torchprobe

#endif  // TORCHPROBE_ATTACH_INJECT_LIBRARY_H
