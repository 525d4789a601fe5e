// x86-64 system call names; see the header. The numbers are the kernel's
// ABI (arch/x86/entry/syscalls/syscall_64.tbl), which never changes.
#include "userspace/base/syscall_names.h"

#include <utility>

namespace torchprobe {
namespace {

constexpr std::pair<int32_t, const char*> kNames[] = {
    {0, "read"},         {1, "write"},         {2, "open"},           {3, "close"},
    {4, "stat"},         {5, "fstat"},         {6, "lstat"},          {7, "poll"},
    {8, "lseek"},        {13, "rt_sigaction"}, {21, "access"},        {89, "readlink"},
    {217, "getdents64"}, {262, "newfstatat"},  {332, "statx"},        {78, "getdents"},         {9, "mmap"},          {10, "mprotect"},      {11, "munmap"},
    {12, "brk"},         {16, "ioctl"},        {17, "pread64"},       {18, "pwrite64"},
    {19, "readv"},       {20, "writev"},       {23, "select"},        {24, "sched_yield"},
    {26, "msync"},       {28, "madvise"},      {34, "pause"},         {35, "nanosleep"},
    {40, "sendfile"},    {42, "connect"},      {43, "accept"},        {44, "sendto"},
    {45, "recvfrom"},    {46, "sendmsg"},      {47, "recvmsg"},       {56, "clone"},
    {57, "fork"},        {58, "vfork"},        {59, "execve"},        {60, "exit"},
    {61, "wait4"},       {62, "kill"},         {72, "fcntl"},         {73, "flock"},
    {74, "fsync"},       {75, "fdatasync"},    {77, "ftruncate"},     {101, "ptrace"},
    {128, "rt_sigtimedwait"}, {130, "rt_sigsuspend"}, {202, "futex"}, {230, "clock_nanosleep"},
    {231, "exit_group"}, {232, "epoll_wait"},  {247, "waitid"},       {257, "openat"},
    {270, "pselect6"},   {271, "ppoll"},       {275, "splice"},       {281, "epoll_pwait"},
    {285, "fallocate"},  {288, "accept4"},     {299, "recvmmsg"},     {307, "sendmmsg"},
    {318, "getrandom"},  {426, "io_uring_enter"}, {435, "clone3"},    {441, "epoll_pwait2"},
    {449, "futex_waitv"}, {455, "futex_wait"},
};

}  // namespace

std::string SyscallName(int32_t number) {
  if (number < 0) return "";
  for (const auto& [n, name] : kNames)
    if (n == number) return name;
  return "syscall " + std::to_string(number);
}

char TaskStateLetter(uint32_t state) {
  if (state & 0x2) return state & 0x400 ? 'I' : 'D';  // TASK_UNINTERRUPTIBLE, with TASK_NOLOAD: idle
  if (state & 0x1) return 'S';                         // TASK_INTERRUPTIBLE
  if (state & 0x4) return 'T';                         // __TASK_STOPPED
  if (state & 0x8) return 't';                         // __TASK_TRACED
  if (state & 0x80) return 'X';                        // TASK_DEAD
  return '?';
}

}  // namespace torchprobe
