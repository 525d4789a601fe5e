// SPDX-License-Identifier: GPL-2.0
/*
 * Op returns through uretprobes, made safe for C++ exceptions.
 *
 * A uretprobe costs a tenth of a uprobe on `ret` (x86 single-steps `ret`),
 * but the kernel replaces the return address in the stack slot with its
 * trampoline, and the C++ unwinder, walking the stack for a handler, finds no
 * unwind info for the trampoline and terminates the process. So, when an
 * exception is about to be raised (the unwinder's entry points: see
 * userspace/discover/unwinder_probes.h), on_throw lists the slots of this
 * thread that still hold the trampoline, as the kernel itself records them
 * (current->utask->return_instances: slot address and original return
 * address), puts them in the `fixes` map and stops the thread with a signal.
 * BPF may not write user memory under kernel lockdown; torchprobe's keeper,
 * the thread's ptrace tracer, writes each original return address back
 * (only where the slot still holds the trampoline), and resumes the thread
 * with the signal suppressed: no one else ever sees the signal or the stop.
 * The ops whose addresses were given back return without a return event;
 * EV_OP_RESTORED tells the model so.
 *
 * list_returns, a task iterator, gives the same list for every thread of a
 * process: the keeper gives all addresses back when it lets a process go, so
 * that no trampoline is left on a stack that an exception may walk later.
 */
#include "bpf/common.bpf.h"

#include <bpf/bpf_core_read.h>

#define SIGSTOP 19
#define SIGURG 23

/* Fix requests by thread id, written by on_throw, taken by the keeper. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct tp_return_slots);
} fixes SEC(".maps");

/* Room to build one tp_return_slots (over 1 KB: not on the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tp_return_slots);
} slots_tmp SEC(".maps");

struct slot_walk {
	struct return_instance *ri;
	struct tp_return_slots *out;
	bool only_live;
};

/* One pending return of the walk (a bpf_loop callback: the verifier checks
 * it once, not 64 times). */
static long take_slot(__u32 i, void *data)
{
	struct slot_walk *w = data;
	struct tp_return_slots *out = w->out;
	struct return_instance *ri = w->ri;  /* a plain read: BPF_CORE_READ would relocate w too */
	__u64 slot, value = 0;
	__u32 n = out->count;

	if (!ri)
		return 1;
	slot = BPF_CORE_READ(ri, stack);
	if (!w->only_live ||
	    (!bpf_probe_read_user(&value, sizeof(value), (void *)slot) && value == out->trampoline)) {
		if (n < TP_MAX_RETURNS) {
			out->slot[n & (TP_MAX_RETURNS - 1)] = slot;
			out->orig[n & (TP_MAX_RETURNS - 1)] = BPF_CORE_READ(ri, orig_ret_vaddr);
			out->count = n + 1;
		}
	}
	w->ri = BPF_CORE_READ(ri, next);
	return 0;
}

/* The slots of `task`'s pending returns into `out`. With `only_live`
 * (task is current), only those whose slot still holds the trampoline: an
 * op that already returned normally after an earlier fix left its instance
 * behind, pointing at a slot that now holds something else. */
static __always_inline void read_return_slots(struct task_struct *task, bool only_live,
					      struct tp_return_slots *out)
{
	struct slot_walk walk = {
		.ri = BPF_CORE_READ(task, utask, return_instances),
		.out = out,
		.only_live = only_live,
	};

	out->tid = BPF_CORE_READ(task, pid);
	out->trampoline = BPF_CORE_READ(task, mm, uprobes_state.xol_area, vaddr);
	out->count = 0;
	bpf_loop(TP_MAX_RETURNS, take_slot, &walk, 0);
}

/* The uretprobe: the return address was popped, SP is the call's frame. */
SEC("uretprobe")
int op_uret(struct pt_regs *ctx)
{
	return emit_op(ctx, EV_OP_EXIT, PT_REGS_SP(ctx));
}

/* On the unwinder's entry points (_Unwind_RaiseException and the others that
 * start a stack walk). */
SEC("uprobe")
int on_throw(struct pt_regs *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task_btf();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid, zero = 0;
	struct tp_return_slots *s;
	__u64 blocked;

	if (cfg.filter_pids && !is_traced(pid_tgid >> 32))
		return 0;
	if (!BPF_CORE_READ(task, utask, return_instances))
		return 0;  /* the common case: no op of ours is open on this thread */
	s = bpf_map_lookup_elem(&slots_tmp, &zero);
	if (!s)
		return 0;
	read_return_slots(task, true, s);
	if (!s->count)
		return 0;
	/* SIGURG is ignored by default, so a stray one is harmless; SIGSTOP
	 * cannot be blocked, for a thread that blocks SIGURG. Either way the
	 * tracer sees it first and suppresses it. */
	blocked = BPF_CORE_READ(task, blocked.sig[0]);
	s->signal = blocked & (1ull << (SIGURG - 1)) ? SIGSTOP : SIGURG;
	if (bpf_map_update_elem(&fixes, &tid, s, BPF_ANY))
		return 0;  /* no room: counted by the keeper as an unfixed throw if it dies */
	emit_op_event(EV_OP_RESTORED, s->count, PT_REGS_SP(ctx) + 8, pid_tgid, bpf_ktime_get_ns());
	bpf_send_signal_thread(s->signal);
	return 0;
}

/* Every thread of the process the iterator link names: its pending returns. */
SEC("iter/task")
int list_returns(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct tp_return_slots *s;
	__u32 zero = 0;

	if (!task)
		return 0;
	s = bpf_map_lookup_elem(&slots_tmp, &zero);
	if (!s)
		return 0;
	read_return_slots(task, false, s);
	if (s->count)
		bpf_seq_write(ctx->meta->seq, s, sizeof(*s));
	return 0;
}

