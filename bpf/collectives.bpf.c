// SPDX-License-Identifier: GPL-2.0
/*
 * collective_enter: the entry of a c10d collective (discover/collective_probes:
 * c10d::ops::<op> in PyTorch 1.x, ProcessGroupGloo::<op> in 2.x), an op
 * entry with what userspace cannot read later, the caller's frame being gone
 * by then (struct tp_collective_event): its process group's address, rank
 * and size, and the tensor list's length, summed numel_ and dtype. How the
 * op receives them and where rank_ and numel_ are: its tp_op_layout in
 * op_layouts (bpf/common.bpf.h), by op id. Bounded reads of the target's
 * memory, never a write; 0 when unreadable. Returns go through the op
 * programs.
 */
#include "bpf/common.bpf.h"

/* An at::Tensor is its TensorImpl's address; numel_ is followed by its
 * TypeMeta index (the dtype). */
static __always_inline void sum_tensor_sizes(struct tp_collective_event *e, __u64 data, __u64 numel_offset)
{
	__u64 numel_sum = 0;
	__u16 dtype = 0;
	__u8 one_dtype = 1;

	if (!data || !numel_offset || e->tensors == 0 || e->tensors > TP_COLLECTIVE_MAX_TENSORS)
		return;
#pragma unroll
	for (int i = 0; i < TP_COLLECTIVE_MAX_TENSORS; i++) {
		__u64 impl = 0;
		struct { __s64 numel; __u16 dtype; } meta = {};

		if (i >= e->tensors)
			break;
		if (bpf_probe_read_user(&impl, sizeof(impl), (void *)(data + 8 * i)) ||
		    bpf_probe_read_user(&meta, sizeof(meta), (void *)(impl + numel_offset)) ||
		    meta.numel < 0)
			return;
		numel_sum += meta.numel;
		if (i == 0)
			dtype = meta.dtype;
		else if (meta.dtype != dtype)
			one_dtype = 0;
	}
	e->numel = numel_sum;
	e->dtype = dtype;
	e->one_dtype = one_dtype;
}

static __always_inline void read_collective(struct pt_regs *ctx, struct tp_collective_event *e,
					    const struct tp_op_layout *l)
{
	__u64 group = PT_REGS_PARM2(ctx);
	struct { __s32 rank; __s32 size; } rank_size = {};
	__u64 list[2] = {};
	__u64 data = 0;

	/* 1.x: const intrusive_ptr<ProcessGroup>& (the group's address is its
	 * first word); 2.x: the group is `this`. */
	if (l->collective == TP_COLLECTIVE_BY_HOLDER &&
	    bpf_probe_read_user(&group, sizeof(group), (void *)PT_REGS_PARM2(ctx)))
		return;
	e->group = group;
	if (!bpf_probe_read_user(&rank_size, sizeof(rank_size), (void *)(group + l->group_rank_offset))) {
		e->rank = rank_size.rank;
		e->group_size = rank_size.size;
	}
	if (l->collective == TP_COLLECTIVE_BY_HOLDER) {
		data = PT_REGS_PARM3(ctx);  /* ArrayRef<Tensor>: data, length */
		e->tensors = PT_REGS_PARM4(ctx);
	} else if (!bpf_probe_read_user(list, sizeof(list), (void *)PT_REGS_PARM3(ctx))) {
		data = list[0];  /* std::vector<Tensor>: begin, end */
		e->tensors = (list[1] - list[0]) / 8;
	}
	sum_tensor_sizes(e, data, l->tensor_numel_offset);
}

SEC("uprobe")
int collective_enter(struct pt_regs *ctx)
{
	const struct tp_op_layout *l;
	struct tp_collective_event *e;
	__u32 op_id;

	e = (struct tp_collective_event *)reserve_entry(ctx, EV_COLLECTIVE, sizeof(*e), &op_id);
	if (!e)
		return 0;
	e->group = 0;
	e->rank = e->group_size = 0;
	e->tensors = e->numel = 0;
	e->dtype = 0;
	e->one_dtype = 0;
	__builtin_memset(e->pad, 0, sizeof(e->pad));
	l = bpf_map_lookup_elem(&op_layouts, &op_id);
	if (l && l->collective != TP_COLLECTIVE_NONE)
		read_collective(ctx, e, l);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}
