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
	__u64 sp = PT_REGS_SP(ctx);
	struct tp_cuda_call_event *e;
	__u32 op_id;

	e = (struct tp_cuda_call_event *)reserve_entry(ctx, EV_CUDA_CALL, sizeof(*e), &op_id);
	if (!e)
		return 0;
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

