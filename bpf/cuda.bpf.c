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

/* A c10d collective's entry (cookie bits 32-39: enum tp_collective_layout,
 * 40-47: the offset of rank_ in its process group object) takes the stack
 * words' place with what userspace cannot read later, the caller's frame
 * being gone by then: stack[0] the process group's address, stack[1] its
 * rank_ (low half) and size_ (high half), stack[2] the tensor list's length
 * when the op's first argument is one; and, bits 48-55 giving TensorImpl's
 * numel_ offset (its TypeMeta index follows it), regs[4] the list's summed
 * numel_ and regs[5] the first tensor's dtype index, bit 16 set when every
 * tensor has it (the registers' raw values are not needed for collectives).
 * Bounded reads; 0 when unreadable. */
/* regs[4], regs[5] above: an at::Tensor is its TensorImpl's address. */
static __always_inline void sum_tensor_sizes(struct tp_cuda_call_event *e, __u64 data, __u64 numel_offset)
{
	__u64 numel_sum = 0;
	__u32 dtype = 0x10000;  /* bit 16: one dtype */

	e->regs[4] = e->regs[5] = 0;
	if (!data || !numel_offset || e->stack[2] == 0 || e->stack[2] > TP_COLLECTIVE_MAX_TENSORS)
		return;
#pragma unroll
	for (int i = 0; i < TP_COLLECTIVE_MAX_TENSORS; i++) {
		__u64 impl = 0;
		struct { __s64 numel; __u16 dtype; } meta = {};

		if (i >= e->stack[2])
			break;
		if (bpf_probe_read_user(&impl, sizeof(impl), (void *)(data + 8 * i)) ||
		    bpf_probe_read_user(&meta, sizeof(meta), (void *)(impl + numel_offset)) ||
		    meta.numel < 0)
			return;
		numel_sum += meta.numel;
		if (i == 0)
			dtype |= meta.dtype;
		else if (meta.dtype != (dtype & 0xffff))
			dtype = meta.dtype & 0xffff;  /* mixed: bit 16 cleared */
	}
	e->regs[4] = numel_sum;
	e->regs[5] = dtype;
}

static __always_inline void read_collective_args(struct tp_cuda_call_event *e, __u64 cookie)
{
	__u32 layout = (cookie >> 32) & 0xff;
	__u64 rank_offset = (cookie >> 40) & 0xff;
	__u64 numel_offset = (cookie >> 48) & 0xff;
	__u64 group = e->regs[1];
	__u64 list[2] = {};
	__u64 data = 0;

	if (layout == TP_COLLECTIVE_NONE)
		return;
	e->op.pad = layout;
	__builtin_memset(e->stack, 0, sizeof(e->stack));
	if (layout == TP_AUTOGRAD_NODE) {  /* the node's vtable pointer: a bounded read */
		__u64 object_offset = (cookie >> 56) * 8;
		__u64 object = 0;

		bpf_probe_read_user(&e->stack[0], sizeof(e->stack[0]), (void *)e->regs[2]);
		/* Were it a Python Function's node (PyNode), the type of its Python
		 * object (Py_TYPE: the word after the refcount), which names it. */
		if (object_offset &&
		    !bpf_probe_read_user(&object, sizeof(object), (void *)(e->regs[2] + object_offset)) && object)
			bpf_probe_read_user(&e->stack[1], sizeof(e->stack[1]), (void *)(object + 8));
		return;
	}
	if (layout == TP_COLLECTIVE_BY_HOLDER &&
	    bpf_probe_read_user(&group, sizeof(group), (void *)e->regs[1]))
		return;
	e->stack[0] = group;
	if (bpf_probe_read_user(&e->stack[1], sizeof(e->stack[1]), (void *)(group + rank_offset)))
		e->stack[1] = 0;
	if (layout == TP_COLLECTIVE_BY_HOLDER) {
		data = e->regs[2];  /* ArrayRef<Tensor>: data, length */
		e->stack[2] = e->regs[3];
	} else if (!bpf_probe_read_user(list, sizeof(list), (void *)e->regs[2])) {
		data = list[0];  /* std::vector<Tensor>: begin, end */
		e->stack[2] = (list[1] - list[0]) / 8;
	}
	sum_tensor_sizes(e, data, numel_offset);
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

