/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cuda_enter: the entry program of the CUDA probe set (runtime, driver and
 * NCCL entry points; discover/cuda_probes). An op entry like op_enter's, with
 * the call's raw arguments: registers, and the stack words above the return
 * address (cudaLaunchKernel's stream, cuLaunchKernel's block.z and stream,
 * NCCL's stream are passed there). Returns go through the op programs.
 * Included by torchprobe.bpf.c (shares its maps, gate and pid filter).
 */
#ifndef TORCHPROBE_BPF_CUDA_BPF_H
#define TORCHPROBE_BPF_CUDA_BPF_H

/* A c10d collective's entry (cookie bits 32-39: enum tp_collective_layout,
 * 40-47: the offset of rank_ in its process group object) takes the stack
 * words' place with what userspace cannot read later, the caller's frame
 * being gone by then: stack[0] the process group's address, stack[1] its
 * rank_ (low half) and size_ (high half), stack[2] the tensor list's length
 * when the op's first argument is one. Bounded reads; 0 when unreadable. */
static __always_inline void read_collective_args(struct tp_cuda_call_event *e, __u64 cookie)
{
	__u32 layout = (cookie >> 32) & 0xff;
	__u64 rank_offset = (cookie >> 40) & 0xff;
	__u64 group = e->regs[1];
	__u64 list[2] = {};

	if (layout == TP_COLLECTIVE_NONE)
		return;
	e->op.pad = layout;
	__builtin_memset(e->stack, 0, sizeof(e->stack));
	if (layout == TP_COLLECTIVE_BY_HOLDER &&
	    bpf_probe_read_user(&group, sizeof(group), (void *)e->regs[1]))
		return;
	e->stack[0] = group;
	if (bpf_probe_read_user(&e->stack[1], sizeof(e->stack[1]), (void *)(group + rank_offset)))
		e->stack[1] = 0;
	if (layout == TP_COLLECTIVE_BY_HOLDER) {
		e->stack[2] = e->regs[3];  /* ArrayRef<Tensor>: data, length */
	} else if (!bpf_probe_read_user(list, sizeof(list), (void *)e->regs[2])) {
		e->stack[2] = (list[1] - list[0]) / 8;  /* std::vector<Tensor>: begin, end */
	}
}

SEC("uprobe")
int cuda_enter(struct pt_regs *ctx)
{
	__u64 ts = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 op_id = (__u32)cookie;
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
	read_collective_args(e, cookie);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

#endif /* TORCHPROBE_BPF_CUDA_BPF_H */
