// SPDX-License-Identifier: GPL-2.0
/*
 * --sched: why a traced thread was not running. The scheduler's own
 * tracepoints (BTF raw tracepoints: no tracefs), filtered to the threads of
 * processes whose libtorch is attached:
 *  - sched_switch, as a traced thread leaves its CPU: preempted (or yielded,
 *    still runnable) or asleep, and, asleep, in which system call (its user
 *    registers' orig_ax) and on which futex word (rdi): a futex inside its
 *    interpreter's GIL (sched_gil, set by userspace) is a GIL wait. As a
 *    traced thread comes back: one EV_OFFCPU for the time it was off.
 *  - sched_wakeup, as an asleep traced thread is put back on a run queue:
 *    asleep until then, runnable (waiting for a CPU) after.
 * Two hash lookups on every context switch of the machine (the pids map,
 * for the thread going and the one coming), more only for traced threads.
 */
#include "bpf/common.bpf.h"

#define SCHED_TASK_RUNNING 0
#define SCHED_SYS_FUTEX 202  /* x86-64 */

/* tid -> its time off the CPU now. LRU: a thread that dies asleep (its
 * process killed) cannot fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct tp_sched_off);
} sched_off SEC(".maps");

/* pid -> the address range of its interpreter's GIL (none: no GIL waits told apart). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TP_MAX_PIDS);
	__type(key, __u32);
	__type(value, struct tp_gil_range);
} sched_gil SEC(".maps");

static __always_inline void sched_left(struct task_struct *prev, bool preempt, unsigned int prev_state, __u64 now)
{
	__u32 tgid = prev->tgid;
	__u32 tid = prev->pid;
	struct tp_sched_off off = {};

	if (!is_attached(tgid))
		return;
	off.off_ns = now;
	off.syscall = -1;
	if (preempt || prev_state == SCHED_TASK_RUNNING) {
		off.kind = OFFCPU_PREEMPTED;
		off.wake_ns = now;
	} else {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
		struct tp_gil_range *gil;

		off.kind = OFFCPU_BLOCKED;
		off.state = (__u16)prev_state;
		if (regs) {
			off.syscall = (__s32)regs->orig_ax;
			if (off.syscall == SCHED_SYS_FUTEX) {
				off.futex = regs->di;
				gil = bpf_map_lookup_elem(&sched_gil, &tgid);
				if (gil && off.futex >= gil->begin && off.futex < gil->end)
					off.kind = OFFCPU_GIL;
			}
		}
	}
	bpf_map_update_elem(&sched_off, &tid, &off, BPF_ANY);
}

static __always_inline void sched_came_back(struct task_struct *next, __u64 now)
{
	__u32 tgid = next->tgid;
	__u32 tid = next->pid;
	struct tp_sched_off *off;
	struct tp_offcpu_event *e;

	if (!is_attached(tgid))
		return;
	off = bpf_map_lookup_elem(&sched_off, &tid);
	if (!off)
		return;  /* it left before it was traced */
	if (gate_open()) {
		e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
		if (!e) {
			count_drop(DROP_RINGBUF_FULL);
		} else {
			fill_header(&e->hdr, EV_OFFCPU, sizeof(*e), (__u64)tgid << 32 | tid, now);
			e->off_ns = off->off_ns;
			e->wake_ns = off->wake_ns;
			e->futex = off->futex;
			e->syscall = off->syscall;
			e->kind = off->kind;
			e->state = off->state;
			bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
		}
	}
	bpf_map_delete_elem(&sched_off, &tid);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();

	sched_left(prev, preempt, prev_state, now);
	sched_came_back(next, now);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
	__u32 tid = p->pid;
	struct tp_sched_off *off = bpf_map_lookup_elem(&sched_off, &tid);

	/* Only a traced thread has an entry; the first wakeup counts (a
	 * wakeup of a runnable thread is not one). */
	if (off && !off->wake_ns)
		off->wake_ns = bpf_ktime_get_ns();
	return 0;
}
