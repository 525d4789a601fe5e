// SPDX-License-Identifier: GPL-2.0
/*
 * The boxed path's entry (userspace/discover/boxed_probes.h): on the first
 * instruction of each copy of c10::Dispatcher::callBoxed. Which operator it
 * was called for is read from its handle, read-only and bounded:
 *   handle  = arg0 + handle_offset           (the walk found where it is: the
 *                                             op's tp_op_layout in op_layouts)
 *   def     = *(OperatorDef **)handle        (OperatorHandle::operatorDef_,
 *                                             its first member in 1.13 and 2.x)
 *   name    = def->op.name_.name             (OperatorEntry's first member,
 *   overload= def->op.name_.overload_name     an OperatorName: two std::string)
 * A std::string begins with its data pointer, NUL-terminated. The return
 * goes through the ops' own returns route, under the copy's op id.
 * Shares the op emit path and gate (bpf/common.bpf.h).
 */
#include "bpf/common.bpf.h"

#define TP_STD_STRING_SIZE 32  /* libstdc++'s std::string: pointer, size, 16-byte buffer */

static __always_inline void read_std_string(char *dst, __u64 string_addr)
{
	__u64 data = 0;

	dst[0] = 0;
	if (bpf_probe_read_user(&data, sizeof(data), (void *)string_addr) || !data)
		return;
	if (bpf_probe_read_user_str(dst, TP_OP_NAME_LEN, (void *)data) < 0)
		dst[0] = 0;
}

SEC("uprobe")
int boxed_enter(struct pt_regs *ctx)
{
	const struct tp_op_layout *l;
	struct tp_boxed_event *e;
	__u64 def = 0;
	__u32 op_id;

	/* Its first fields are an op entry's (bpf/events.h). */
	e = (struct tp_boxed_event *)reserve_entry(ctx, EV_BOXED_ENTER, sizeof(*e), &op_id);
	if (!e)
		return 0;
	l = bpf_map_lookup_elem(&op_layouts, &op_id);
	if (!l || bpf_probe_read_user(&def, sizeof(def), (void *)(PT_REGS_PARM1(ctx) + l->handle_offset)))
		def = 0;  /* no layout: unnamed, as an unreadable handle */
	e->def = def;
	e->name[0] = 0;
	e->overload[0] = 0;
	if (def) {
		read_std_string(e->name, def);
		read_std_string(e->overload, def + TP_STD_STRING_SIZE);
	}
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

