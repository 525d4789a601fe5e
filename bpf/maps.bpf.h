/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Maps and helpers shared by torchprobe's BPF programs: the two ring buffers,
 * drop counting and the traced-process filter. */
#ifndef TORCHPROBE_MAPS_BPF_H
#define TORCHPROBE_MAPS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "bpf/events.h"

/* Set by userspace before load. */
const volatile struct {
	bool filter_pids;   /* check the pids map (launch mode; pid mode filters in the link) */
	bool follow_forks;  /* add processes forked by traced ones to the pids map */
	bool hold_forks;    /* ... and hold each stopped until userspace has attached it */
} cfg = {};

/* High-rate op events: submitted without wakeup, drained on a timer. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 32 << 20);  /* resized by userspace before load */
} events SEC(".maps");

/* Rare control events (library loads, forks, exits): wake the reader. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} ctl_events SEC(".maps");

/* Traced processes (tgid -> 1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TP_MAX_PIDS);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

/* What the probes may emit (struct tp_ctl), set by userspace at any time:
 * and by torchprobe's keeper process if torchprobe dies. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tp_ctl);
} ctl SEC(".maps");

/* Hits per op id while the gate is closed: probes still in place after the
 * trace ended are removed hottest first. Rarely written: no per-CPU copies.
 * Mmapable: the keeper reads it every second without a syscall per op. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, TP_MAX_OPS);
	__type(key, __u32);
	__type(value, __u32);
} gated_hits SEC(".maps");

/* Processes stopped by dl_state, on_exec or on_fork that userspace has not
 * resumed yet (tgid -> 1): whoever outlives a dead torchprobe resumes them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TP_MAX_PIDS);
	__type(key, __u32);
	__type(value, __u8);
} held SEC(".maps");

/* Events lost in BPF, by enum tp_drop_reason. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_NR);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

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

#endif /* TORCHPROBE_MAPS_BPF_H */
