// SPDX-License-Identifier: GPL-2.0
/*
 * What `make bench` measures against:
 *  - empty_enter/empty_return: the op attach with no work, the cost floor
 *    (empty_uret: the uretprobe floor, to show what exception safety costs);
 *  - bench_burst, run by BPF_PROG_TEST_RUN: op events through the probes'
 *    emit path at a rate no uprobe can reach, to measure what userspace
 *    sustains.
 */
#include "bpf/common.bpf.h"

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
