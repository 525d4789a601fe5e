// SPDX-License-Identifier: GPL-2.0
/* --shapes: shapes_enter replaces op_enter on libtorch's ops, so the plain
 * entry stays as cheap as it was. At the entry it emits the op entry with
 * the metadata of the op's first TP_SHAPES_TENSORS Tensor arguments (see
 * tp_op_shapes_event): a `const at::Tensor&` is a pointer to the Tensor,
 * whose first word is its TensorImpl*. Every read is a bounded
 * bpf_probe_read_user of the target's memory; nothing is written there. A
 * process without a layout in tensor_layouts gets plain entries. It also
 * reads the thread's autograd sequence number (the profiler's `Sequence
 * number`), when that layout says where it is. */
#include "bpf/common.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TP_MAX_PIDS);
	__type(key, __u32);
	__type(value, struct tp_tensor_layout);
} tensor_layouts SEC(".maps");

/* The storage's data pointer and the version counter of the TensorImpl at
 * `impl` (tp_tensor_layout.storage); left 0 when a read fails (a tensor
 * without storage). */
static __always_inline void read_identity(__u64 impl, __u32 base, struct tp_tensor_meta *t)
{
	__u64 storage = 0, counter = 0;

	if (!bpf_probe_read_user(&storage, sizeof(storage), (void *)(impl + base)) && storage)
		bpf_probe_read_user(&t->storage_data, sizeof(t->storage_data), (void *)(storage + base));
	if (!bpf_probe_read_user(&counter, sizeof(counter), (void *)(impl + base + 24)) && counter)
		bpf_probe_read_user(&t->version, sizeof(t->version), (void *)(counter + base));
}

/* Fills `t` for the Tensor argument whose place is `code` (events.h). */
static __always_inline void read_tensor(struct pt_regs *ctx, const __u64 *regs, __u32 code,
					const struct tp_tensor_layout *l,
					struct tp_tensor_meta *t)
{
	__u64 tensor = 0, impl = 0, sas, dims = 0, sizes, strides;

	__u32 place = code & 63, ref = code >> 6;
	__u8 engaged = 0;

	t->status = TENSOR_NOT_READ;
	if (place == 0)
		return;
	t->status = TENSOR_UNREADABLE;
	if (place <= 6)
		tensor = regs[(place - 1) & 7];
	else if (bpf_probe_read_user(&tensor, sizeof(tensor),
				     (void *)(PT_REGS_SP(ctx) + 8 * (place - 6))))
		return;
	if (!tensor)
		return;
	if (ref != TENSOR_REF_PLAIN) {  /* an optional: None has no Tensor to read */
		if (bpf_probe_read_user(&engaged, sizeof(engaged),
					(void *)(tensor + (ref == TENSOR_REF_C10_OPTIONAL ? 0 : 8))))
			return;
		if (!engaged) {
			t->status = TENSOR_ABSENT;
			return;
		}
		if (ref == TENSOR_REF_C10_OPTIONAL)
			tensor += 8;
	}
	if (bpf_probe_read_user(&impl, sizeof(impl), (void *)tensor) || !impl)
		return;
	t->impl = impl;
	sas = impl + l->sizes_and_strides;
	if (bpf_probe_read_user(&dims, sizeof(dims), (void *)sas) || dims > 64)
		return;
	t->dims = dims;
	if (dims <= 5) {  /* inline: sizes then strides, 5 each */
		sizes = sas + 8;
		strides = sas + 8 + 5 * 8;
	} else {          /* out of line: a pointer to dims sizes then dims strides */
		if (bpf_probe_read_user(&sizes, sizeof(sizes), (void *)(sas + 8)))
			return;
		strides = sizes + 8 * dims;
	}
	/* A fixed size: the words past `dims` are not looked at by userspace. */
	if (bpf_probe_read_user(t->sizes, sizeof(t->sizes), (void *)sizes) ||
	    bpf_probe_read_user(t->strides, sizeof(t->strides), (void *)strides) ||
	    bpf_probe_read_user(&t->storage_offset, sizeof(t->storage_offset),
				(void *)(impl + l->storage_offset)) ||
	    bpf_probe_read_user(&t->dtype, sizeof(t->dtype), (void *)(impl + l->dtype)))
		return;
	t->status = dims > TP_SHAPES_DIMS ? TENSOR_TOO_MANY_DIMS : TENSOR_READ;
	if (l->storage && l->storage < 64)  /* --memory: which allocation, which version */
		read_identity(impl, l->storage, t);
}

/* at::sequence_number::peek() of the current thread: its TLS pointer's DTV
 * (at fsbase + 8, glibc), the libtorch block's slot (16 bytes each), the
 * variable in the block. An unallocated block (-1) has not been touched by
 * the thread: 0, where the number starts. */
static __always_inline __u64 read_sequence_nr(const struct tp_tensor_layout *l)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 dtv = 0, block = 0, value = 0;

	if (!l->seq_module || l->seq_module > (1 << 16))
		return TP_SEQ_UNREAD;
	if (bpf_probe_read_user(&dtv, sizeof(dtv), (void *)(task->thread.fsbase + 8)) ||
	    bpf_probe_read_user(&block, sizeof(block), (void *)(dtv + 16 * l->seq_module)))
		return TP_SEQ_UNREAD;
	if (block == ~0ull)
		return 0;
	if (bpf_probe_read_user(&value, sizeof(value), (void *)(block + l->seq_offset)))
		return TP_SEQ_UNREAD;
	return value;
}

SEC("uprobe")
int shapes_enter(struct pt_regs *ctx)
{
	__u64 ts = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 op_id = (__u32)bpf_get_attach_cookie(ctx), tgid = pid_tgid >> 32;
	__u64 frame = PT_REGS_SP(ctx) + 8;
	const struct tp_tensor_layout *l;
	const struct tp_op_layout *places;
	struct tp_op_shapes_event *e;

	if (cfg.filter_pids && !is_traced(tgid))
		return 0;
	if (!gate_passes(EV_OP_ENTER, op_id))
		return 0;
	l = bpf_map_lookup_elem(&tensor_layouts, &tgid);
	if (!l)
		return emit_op_event(EV_OP_ENTER, op_id, frame, pid_tgid, ts);
	e = reserve_op_record(EV_OP_SHAPES, sizeof(*e), pid_tgid, ts);
	if (!e)
		return 0;
	e->op.op_id = op_id;
	e->op.pad = 0;
	e->op.frame = frame;
	e->sequence_nr = read_sequence_nr(l);
	__builtin_memset(e->tensors, 0, sizeof(e->tensors));
	/* The integer argument registers, each loaded from ctx at a fixed
	 * offset (the verifier refuses a computed one), then picked by index. */
	__u64 regs[8] = {PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx),
			 PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx), ctx->r9};
	places = bpf_map_lookup_elem(&op_layouts, &op_id);
	if (places) {  /* none: no Tensor read (TENSOR_NOT_READ) */
		read_tensor(ctx, regs, places->tensor_places[0], l, &e->tensors[0]);
		read_tensor(ctx, regs, places->tensor_places[1], l, &e->tensors[1]);
		read_tensor(ctx, regs, places->tensor_places[2], l, &e->tensors[2]);
		read_tensor(ctx, regs, places->tensor_places[3], l, &e->tensors[3]);
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

