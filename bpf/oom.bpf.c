// SPDX-License-Identifier: GPL-2.0
/*
 * The out-of-memory probe set: where c10 raises the errors that running out
 * of memory makes, seen before the exception unwinds anything (a flight
 * recorder dumps on them). Both fire only on a failure, so they cost nothing
 * while a job runs:
 *  - oom_enforce on c10::ThrowEnforceNotMet(const char* file, int line, ...)
 *    (both overloads): every failed CAFFE_ENFORCE, which is how alloc_cpu
 *    reports that posix_memalign failed ("DefaultCPUAllocator: can't
 *    allocate memory", 1.13 and 2.x); the file and line say which check;
 *  - oom_device on c10::reportOutOfMemoryToProfiler(alloc_size, ...): what a
 *    device caching allocator (CUDA's) calls right before it raises
 *    OutOfMemoryError, profiler or not.
 * Events go to the op ring after the same pid filter and gate as op
 * entries, so each stays in order with its thread's ops.
 */
#include "bpf/common.bpf.h"

static __always_inline struct tp_oom_event *reserve_oom(__u64 pid_tgid, __u16 kind)
{
	struct tp_oom_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_drop(DROP_RINGBUF_FULL);
		return 0;
	}
	fill_header(&e->hdr, EV_OOM, sizeof(*e), pid_tgid, bpf_ktime_get_ns());
	e->kind = kind;
	e->bytes = 0;
	e->line = 0;
	e->file_len = 0;
	return e;
}

SEC("uprobe")
int oom_enforce(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct tp_oom_event *e;
	long n;

	if (!lone_event_passes(pid_tgid))
		return 0;
	e = reserve_oom(pid_tgid, TP_OOM_ENFORCE);
	if (!e)
		return 0;
	e->line = (__s32)PT_REGS_PARM2(ctx);
	n = bpf_probe_read_user_str(e->file, sizeof(e->file), (const void *)PT_REGS_PARM1(ctx));
	e->file_len = n > 0 ? (__u16)(n - 1) : 0;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("uprobe")
int oom_device(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct tp_oom_event *e;

	if (!lone_event_passes(pid_tgid))
		return 0;
	e = reserve_oom(pid_tgid, TP_OOM_DEVICE);
	if (!e)
		return 0;
	e->bytes = (__s64)PT_REGS_PARM1(ctx);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}
