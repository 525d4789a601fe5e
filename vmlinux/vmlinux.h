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

struct task_struct {
	int pid;
	int tgid;
	char comm[16];
};

#ifndef BPF_NO_PRESERVE_ACCESS_INDEX
#pragma clang attribute pop
#endif

#endif /* TORCHPROBE_VMLINUX_H */
