// SPDX-License-Identifier: GPL-2.0
/*
 * torchprobe's BPF programs, one object so all share the maps:
 *  - op_enter/op_return: on the first instruction and on every `ret` of
 *    every at::_ops::<op>::call (cookie = op id): the returns route that
 *    needs no help from userspace, at ~10x the cost of
 *  - op_uret, a uretprobe, with on_throw and list_returns to keep the
 *    target's exceptions working (bpf/uretprobe_returns.bpf.h);
 *  - boxed_enter: the entry of each copy of Dispatcher::callBoxed, which
 *    reads the operator's name from its handle (bpf/boxed.bpf.h);
 *  - cuda_enter: op_enter with the call's arguments, on CUDA runtime, driver
 *    and NCCL entry points (bpf/cuda.bpf.h);
 *  - on_catch: libstdc++'s __cxa_begin_catch, so that ops an exception
 *    unwound are closed where it was caught;
 *  - empty_enter/empty_return: the same attach with no work, the cost floor
 *    that `make bench` measures against (empty_uret: the uretprobe floor,
 *    to show what exception safety costs),
 *  - dl_state: the dynamic loader's _dl_debug_state, to attach to libtorch
 *    the moment a process maps it (held stopped until then when launched),
 *  - on_fork/on_exec/on_exit: follow forked processes, see programs
 *    replaced (held stopped until their loader is watched, when launched)
 *    and threads exit.
 *  - annot_probe: record_function ranges (bpf/annotations.bpf.h).
 *  - shapes_enter: op_enter with the op's Tensor arguments' shapes, with
 *    --shapes (bpf/shapes.bpf.h).
 * Every op program passes the gate (ctl map) first: the trace ends when
 * userspace says, not when the probes are finally removed.
 *  - alloc_enter/alloc_return/free_enter: libc10's CPU allocator, with
 *    --memory (bpf/allocator.bpf.h);
 *  - bench_burst: `make bench` only, run by BPF_PROG_TEST_RUN: op events
 *    through the same emit path at a rate no uprobe can reach, to measure
 *    what userspace sustains.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpf/maps.bpf.h"

#define SIGSTOP 19

/* A record of `size` bytes in the op ring with its header filled, or NULL
 * (a drop counted) when the ring is full. */
static __always_inline void *reserve_op_record(__u16 type, __u16 size, __u64 pid_tgid, __u64 ts)
{
	struct tp_event_header *h = bpf_ringbuf_reserve(&events, size, 0);

	if (!h) {
		count_drop(DROP_RINGBUF_FULL);
		return 0;
	}
	fill_header(h, type, size, pid_tgid, ts);
	return h;
}

static __always_inline int emit_op_event(__u16 type, __u32 op_id, __u64 frame, __u64 pid_tgid,
					 __u64 ts)
{
	struct tp_op_event *e = reserve_op_record(type, sizeof(*e), pid_tgid, ts);

	if (!e)
		return 0;
	e->op_id = op_id;
	e->pad = 0;
	e->frame = frame;
	/* No wakeup: the reader drains on a timer; a wakeup per event doubles
	 * the cost of a probe hit. */
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

/* The gate ends the trace the moment userspace asks, however long the
 * probes then take to be removed (per-symbol uprobes: minutes). */
static __always_inline bool gate_passes(__u16 type, __u32 op_id)
{
	struct tp_ctl *c = get_ctl();
	__u32 *hits;

	if (!c || c->gate == GATE_OPEN)
		return true;
	if (c->gate == GATE_RETURNS_ONLY && type != EV_OP_ENTER)
		return true;
	op_id &= ~TP_COOKIE_SHARED_RET;
	if (c->gate == GATE_CLOSED && (hits = bpf_map_lookup_elem(&gated_hits, &op_id)))
		__sync_fetch_and_add(hits, 1);
	return false;
}

static __always_inline int emit_op(struct pt_regs *ctx, __u16 type, __u64 frame)
{
	__u64 ts = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 op_id = (__u32)bpf_get_attach_cookie(ctx);

	if (cfg.filter_pids && !is_traced(pid_tgid >> 32))
		return 0;
	if (!gate_passes(type, op_id))
		return 0;
	return emit_op_event(type, op_id, frame, pid_tgid, ts);
}

/* At the first instruction and at `ret`, SP points at the return address:
 * the frame is the slot above it. */
SEC("uprobe")
int op_enter(struct pt_regs *ctx)
{
	return emit_op(ctx, EV_OP_ENTER, PT_REGS_SP(ctx) + 8);
}

SEC("uprobe")
int op_return(struct pt_regs *ctx)
{
	return emit_op(ctx, EV_OP_EXIT, PT_REGS_SP(ctx) + 8);
}

/* In the op ring, so it stays in order with the thread's op events. */
SEC("uprobe")
int on_catch(struct pt_regs *ctx)
{
	return emit_op(ctx, EV_OP_UNWIND, PT_REGS_SP(ctx) + 8);
}

#include "bpf/uretprobe_returns.bpf.h"
#include "bpf/allocator.bpf.h"
#include "bpf/boxed.bpf.h"
#include "bpf/annotations.bpf.h"
#include "bpf/cuda.bpf.h"
#include "bpf/shapes.bpf.h"

SEC("uprobe")
int empty_enter(struct pt_regs *ctx)
{
	return 0;
}

SEC("uprobe")
int empty_return(struct pt_regs *ctx)
{
	return 0;
}

/* Bench: the uretprobe floor. */
SEC("uretprobe")
int empty_uret(struct pt_regs *ctx)
{
	return 0;
}

/* A filled control event, reserved but not submitted; NULL (a drop counted)
 * when the ring is full. */
static __always_inline struct tp_proc_event *reserve_proc(__u16 type, __u64 pid_tgid,
							  __u32 child_pid, __u32 is_leader,
							  const char *comm)
{
	struct tp_proc_event *e = bpf_ringbuf_reserve(&ctl_events, sizeof(*e), 0);

	if (!e) {
		count_drop(DROP_CTL_FULL);
		return 0;
	}
	fill_header(&e->hdr, type, sizeof(*e), pid_tgid, bpf_ktime_get_ns());
	e->child_pid = child_pid;
	e->is_leader = is_leader;
	e->child_held = 0;
	if (comm)
		bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), comm);
	else
		bpf_get_current_comm(e->comm, sizeof(e->comm));
	return e;
}

static __always_inline void emit_proc(__u16 type, __u64 pid_tgid, __u32 child_pid,
				      __u32 is_leader, const char *comm)
{
	struct tp_proc_event *e = reserve_proc(type, pid_tgid, child_pid, is_leader, comm);

	if (e)
		bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

SEC("uprobe")
int dl_state(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct tp_proc_event *e;
	struct tp_ctl *c = get_ctl();
	__u8 one = 1;

	if (!c || c->loads == LOADS_IGNORE || !is_traced(tgid))
		return 0;
	e = reserve_proc(EV_LIB_LOAD, pid_tgid, 0, 0, 0);
	if (!e)
		return 0;
	if (c->loads == LOADS_HOLD && is_waiting(tgid)) {
		/* Stop the process before the new library's constructors run;
		 * userspace attaches if it was libtorch, then sends SIGCONT. The
		 * signal goes before the event is visible, so that userspace's
		 * SIGCONT cannot come first and leave the process stopped; with
		 * no room for the event, no stop. `held` says who to resume if
		 * torchprobe dies meanwhile. */
		bpf_map_update_elem(&held, &tgid, &one, BPF_ANY);
		bpf_send_signal(SIGSTOP);
	}
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return 0;
}

/* Linux 6.13+: a signal to a task other than the current one. Weak: on an
 * older kernel it is NULL and forked children are not held (their first
 * milliseconds, before userspace attaches them, are missed and counted). */
extern int bpf_send_signal_task(struct task_struct *task, int sig, enum pid_type type,
				__u64 value) __ksym __weak;

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 parent_tgid = parent->tgid;
	__u32 child_tgid = child->tgid;
	struct tp_proc_event *e;
	struct tp_ctl *c = get_ctl();
	__u8 one = 1;

	if (!cfg.follow_forks || child_tgid == parent_tgid || !is_traced(parent_tgid))
		return 0;
	bpf_map_update_elem(&pids, &child_tgid, &one, BPF_ANY);
	e = reserve_proc(EV_PROC_FORK, pid_tgid, child_tgid, 0, 0);
	if (!e)
		return 0;
	/* The child has not run yet (this is its parent, inside fork): a
	 * SIGSTOP now stops it before its first instruction, so its first op
	 * is traced once userspace has attached its links and sent SIGCONT.
	 * Only while recording (the gate open), only with room for the event
	 * (else no one would resume it), and not a vfork-style child: it
	 * shares its parent's memory until it execs, runs no op of its own,
	 * and its parent waits for it. */
	if (cfg.hold_forks && bpf_send_signal_task && c && c->gate == GATE_OPEN &&
	    child->mm != parent->mm) {
		bpf_map_update_elem(&held, &child_tgid, &one, BPF_ANY);
		if (bpf_send_signal_task(child, SIGSTOP, PIDTYPE_TGID, 0) == 0)
			e->child_held = 1;
		else
			bpf_map_delete_elem(&held, &child_tgid);
	}
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *task)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct tp_proc_event *e;
	struct tp_ctl *c = get_ctl();
	__u8 one = 1, waiting = PID_WAITING;

	if (!is_traced(tgid))
		return 0;
	e = reserve_proc(EV_PROC_EXEC, pid_tgid, 0, 0, task->comm);
	if (!e)
		return 0;
	if (c && c->loads == LOADS_HOLD) {
		/* Launch mode: the new program may run another dynamic loader
		 * (a chroot's, a container's) that maps libtorch before its
		 * first instruction (DT_NEEDED). Stopped before it runs, as at
		 * dl_state, until userspace has probed that loader; and held
		 * at its loads until its own libtorch is attached, whatever
		 * the rest of the tree has (a vfork'd child, as dash and
		 * Python's subprocess make, is not held at its fork). */
		bpf_map_update_elem(&pids, &tgid, &waiting, BPF_ANY);
		bpf_map_update_elem(&held, &tgid, &one, BPF_ANY);
		bpf_send_signal(SIGSTOP);
	}
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *task)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;

	if (!is_traced(tgid))
		return 0;
	emit_proc(EV_PROC_EXIT, pid_tgid, 0, task->pid == task->tgid, task->comm);
	return 0;
}

#define BENCH_FRAME 0x7ffc0000ull

/* Event i of a burst: op 0 enters, op 1 enters inside it, op 1 returns,
 * op 0 returns, again: what a traced thread sends, as fast as BPF can. */
static long bench_event(__u32 i, void *pid_tgid)
{
	__u32 k = i & 3;
	__u32 inner = k == 1 || k == 2;

	emit_op_event(k < 2 ? EV_OP_ENTER : EV_OP_EXIT, inner, BENCH_FRAME - 64 * inner, *(__u64 *)pid_tgid,
		      bpf_ktime_get_ns());
	return 0;
}

SEC("raw_tp")
int bench_burst(void *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	bpf_loop(TP_BENCH_BURST, bench_event, &pid_tgid, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
