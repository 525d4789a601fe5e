// SPDX-License-Identifier: GPL-2.0
/*
 * Processes and their loader:
 *  - dl_state: the dynamic loader's _dl_debug_state, to attach to libtorch
 *    the moment a process maps it (held stopped until then when launched);
 *  - on_fork/on_exec/on_exit: follow forked processes, see programs
 *    replaced (held stopped until their loader is watched, when launched)
 *    and threads exit. Their events go to the control ring (ctl_events),
 *    which wakes the reader.
 */
#include "bpf/common.bpf.h"

#define SIGSTOP 19

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
	/* A fatal signal or exit_group sets the group's code before any thread
	 * exits; a thread that leaves alone (pthread_exit) has only its own. */
	__u32 code = task->signal->group_exit_code;
	if (!code)
		code = task->exit_code;
	emit_proc(EV_PROC_EXIT, pid_tgid, code, task->pid == task->tgid, task->comm);
	return 0;
}
