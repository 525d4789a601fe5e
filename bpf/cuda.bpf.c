// SPDX-License-Identifier: GPL-2.0
/*
 * cuda_enter: the entry program of the CUDA probe set (runtime, driver and
 * NCCL entry points; discover/cuda_probes). An op entry like op_enter's, with
 * the call's raw arguments: registers, and the stack words above the return
 * address (cudaLaunchKernel's stream, cuLaunchKernel's block.z and stream,
 * NCCL's stream are passed there). Returns go through the op programs.
 * Shares the ops' maps, gate and pid filter (bpf/common.bpf.h).
 */
#include "bpf/common.bpf.h"

SEC("uprobe")
int cuda_enter(struct pt_regs *ctx)
{
	__u64 ts = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 op_id = (__u32)bpf_get_attach_cookie(ctx);
	__u64 sp = PT_REGS_SP(ctx);
	struct tp_cuda_call_event *e;

	if (cfg.filter_pids && !is_traced(pid_tgid >> 32))
		return 0;
	if (!gate_passes(EV_OP_ENTER, op_id))
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(DROP_RINGBUF_FULL);
		return 0;
	}
	fill_header(&e->op.hdr, EV_CUDA_CALL, sizeof(*e), pid_tgid, ts);
	e->op.op_id = op_id;
	e->op.pad = 0;
	e->op.frame = sp + 8;
	e->regs[0] = PT_REGS_PARM1(ctx);
	e->regs[1] = PT_REGS_PARM2(ctx);
	e->regs[2] = PT_REGS_PARM3(ctx);
	e->regs[3] = PT_REGS_PARM4(ctx);
	e->regs[4] = PT_REGS_PARM5(ctx);
	e->regs[5] = ctx->r9;
	/* A bounded read of the target's stack, never a write. */
	if (bpf_probe_read_user(e->stack, sizeof(e->stack), (void *)(sp + 8)))
		__builtin_memset(e->stack, 0, sizeof(e->stack));
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

