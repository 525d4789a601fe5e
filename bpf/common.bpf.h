/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What every capability's file of torchprobe's BPF object shares: the
 * rodata config, the two ring buffers, the gate, drop counting, the
 * traced-process filter and the op emit path.
 *
 * Each bpf/<capability>.bpf.c is compiled alone and `bpftool gen object`
 * links them into one object (the Makefile), as the kernel selftests'
 * linked_maps1.c/linked_maps2.c do. A shared map or variable is defined
 * here, __weak, in every file that includes this header; the linker keeps
 * one (every definition is this one, so they all agree) and every program
 * uses it. Maps one capability alone uses are defined in its file. */
#ifndef TORCHPROBE_COMMON_BPF_H
#define TORCHPROBE_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "bpf/events.h"

/* Set by userspace before load (struct tp_cfg, bpf/events.h). */
const volatile struct tp_cfg cfg __weak = {};

/* High-rate op events: submitted without wakeup, drained on a timer. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 32 << 20);  /* resized by userspace before load */
} events SEC(".maps") __weak;

/* Rare control events (library loads, forks, exits): wake the reader. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} ctl_events SEC(".maps") __weak;

/* Traced processes (tgid -> 1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TP_MAX_PIDS);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps") __weak;

/* What the probes may emit (struct tp_ctl), set by userspace at any time:
 * and by torchprobe's keeper process if torchprobe dies. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tp_ctl);
} ctl SEC(".maps") __weak;

/* Hits per op id while the gate is closed: probes still in place after the
 * trace ended are removed hottest first. Rarely written: no per-CPU copies.
 * Mmapable: the keeper reads it every second without a syscall per op. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, TP_MAX_OPS);
	__type(key, __u32);
	__type(value, __u32);
} gated_hits SEC(".maps") __weak;

/* Processes stopped by dl_state, on_exec or on_fork that userspace has not
 * resumed yet (tgid -> 1): whoever outlives a dead torchprobe resumes them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TP_MAX_PIDS);
	__type(key, __u32);
	__type(value, __u8);
} held SEC(".maps") __weak;

/* Per op id, what the entries that read an op's arguments need to find them
 * (struct tp_op_layout): boxed_enter, collective_enter, autograd_enter and
 * shapes_enter look here, op_enter never. Written by userspace as it
 * attaches an op, before the op's probe is live. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TP_MAX_OPS);
	__type(key, __u32);
	__type(value, struct tp_op_layout);
} op_layouts SEC(".maps") __weak;

/* Events lost in BPF, by enum tp_drop_reason. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_NR);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps") __weak;

static __always_inline void count_drop(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &reason);

	if (n)
		*n += 1;  /* per-CPU slot: no atomics needed */
}

static __always_inline struct tp_ctl *get_ctl(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&ctl, &zero);
}

static __always_inline bool is_traced(__u32 tgid)
{
	return bpf_map_lookup_elem(&pids, &tgid) != 0;
}

/* A traced process whose libtorch is attached (enum tp_pid_state). */
static __always_inline bool is_attached(__u32 tgid)
{
	__u8 *state = bpf_map_lookup_elem(&pids, &tgid);

	return state && *state == PID_ATTACHED;
}

/* A traced process whose libtorch is not attached yet (enum tp_pid_state). */
static __always_inline bool is_waiting(__u32 tgid)
{
	__u8 *state = bpf_map_lookup_elem(&pids, &tgid);

	return state && *state == PID_WAITING;
}

static __always_inline void fill_header(struct tp_event_header *h, __u16 type, __u16 size,
					__u64 pid_tgid, __u64 ts)
{
	h->type = type;
	h->size = size;
	h->pid = pid_tgid >> 32;
	h->tid = (__u32)pid_tgid;
	h->cpu = bpf_get_smp_processor_id();
	h->ts_ns = ts;
}

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

#include "bpf/python_stack.bpf.h"

/* A lone function's event (an allocation, an out-of-memory error): from a
 * traced process (--pid mode filters in the kernel) while the gate is open. */
static __always_inline bool gate_open(void)
{
	struct tp_ctl *c = get_ctl();

	return !c || c->gate == GATE_OPEN;
}

static __always_inline bool lone_event_passes(__u64 pid_tgid)
{
	if (cfg.filter_pids && !is_traced(pid_tgid >> 32))
		return false;
	return gate_open();
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

/* The start of an op entry that carries more than struct tp_op_event (a
 * boxed call, a CUDA call, a collective, an autograd node: each event
 * begins with the entry's fields): the pid filter, the gate, then `size`
 * bytes reserved in the op ring with the header, the op id (the cookie,
 * also in *op_id) and the frame filled; NULL when the call is not traced or
 * the ring is full (a drop counted). */
static __always_inline struct tp_op_event *reserve_entry(struct pt_regs *ctx, __u16 type, __u16 size,
							 __u32 *op_id)
{
	__u64 ts = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct tp_op_event *e;

	*op_id = (__u32)bpf_get_attach_cookie(ctx);
	if (cfg.filter_pids && !is_traced(pid_tgid >> 32))
		return 0;
	if (!gate_passes(EV_OP_ENTER, *op_id))
		return 0;
	if (cfg.python_stacks)
		py_stack_before_entry(pid_tgid, PT_REGS_SP(ctx) + 8, ts);
	e = reserve_op_record(type, size, pid_tgid, ts);
	if (!e)
		return 0;
	e->op_id = *op_id;
	e->pad = 0;
	e->frame = PT_REGS_SP(ctx) + 8;
	return e;
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
	if (type == EV_OP_ENTER && cfg.python_stacks)
		py_stack_before_entry(pid_tgid, frame, ts);
	return emit_op_event(type, op_id, frame, pid_tgid, ts);
}

#endif /* TORCHPROBE_COMMON_BPF_H */
