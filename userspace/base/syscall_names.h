// The names of x86-64 system calls a thread can sleep in, for --sched's
// "Blocked: read"; others are "syscall N". And a task state's letter as ps
// shows it.
#ifndef TORCHPROBE_BASE_SYSCALL_NAMES_H
#define TORCHPROBE_BASE_SYSCALL_NAMES_H

#include <cstdint>
#include <string>

namespace torchprobe {

// "" for -1 (not in a system call).
std::string SyscallName(int32_t number);

// The letter of a kernel task state (task_struct.__state at the switch):
// S, D, I (idle), T (stopped), t (traced), X (dead), ? (other).
char TaskStateLetter(uint32_t state);

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_SYSCALL_NAMES_H
