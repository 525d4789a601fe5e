/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few kernel types torchprobe's BPF programs use, written by hand (perf's
 * approach) instead of a 3 MB generated header. Struct layouts are resolved
 * against the running kernel's BTF at load time (CO-RE), so only the fields
 * we read are listed.
 */
#ifndef TORCHPROBE_VMLINUX_H
#define TORCHPROBE_VMLINUX_H
/* bpf_tracing.h reads pt_regs by the kernel's field names when this is set. */
#define __VMLINUX_H__

typedef unsigned char __u8;
typedef short unsigned int __u16;
typedef unsigned int __u32;
typedef long long unsigned int __u64;
typedef signed char __s8;
typedef short int __s16;
typedef int __s32;
typedef long long int __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

enum {
	BPF_F_MMAPABLE = 1U << 10,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute push (__attribute__((preserve_access_index)), apply_to = record)
#endif

struct pt_regs {
	long unsigned int r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	long unsigned int ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

typedef struct {
	long unsigned int sig[1];
} sigset_t;

/* Uretprobe bookkeeping (kernel/events/uprobes.c): a return probe replaces
 * the return address in the stack slot `stack` with the trampoline at the
 * start of the process' xol area and remembers `orig_ret_vaddr`. */
struct return_instance {
	long unsigned int stack;
	long unsigned int orig_ret_vaddr;
	struct return_instance *next;
};

struct uprobe_task {
	struct return_instance *return_instances;
};

struct xol_area {
	long unsigned int vaddr;
};

struct uprobes_state {
	struct xol_area *xol_area;
};

struct mm_struct {
	struct uprobes_state uprobes_state;
};

/* x86-64: the user TLS pointer (--shapes reads a thread's sequence number). */
struct thread_struct {
	unsigned long fsbase;
};

/* bpf_send_signal_task()'s target: one thread or its whole process. */
enum pid_type {
	PIDTYPE_PID,
	PIDTYPE_TGID,
	PIDTYPE_PGID,
	PIDTYPE_SID,
	PIDTYPE_MAX,
};

struct signal_struct {
	int group_exit_code;
};

struct task_struct {
	int pid;
	int tgid;
	int exit_code;
	char comm[16];
	struct mm_struct *mm;
	struct signal_struct *signal;
	sigset_t blocked;
	struct uprobe_task *utask;
	struct thread_struct thread;
};

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
};

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
};

#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute pop
#endif

#endif /* TORCHPROBE_VMLINUX_H */
