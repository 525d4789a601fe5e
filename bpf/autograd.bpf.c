// SPDX-License-Identifier: GPL-2.0
/*
 * autograd_enter: the entry of the autograd engine's
 * Engine::evaluate_function(this, graph_task&, Node* func, ...)
 * (discover/autograd_probes), an op entry with the node it runs (struct
 * tp_autograd_node_event): the node's vtable pointer, which names its class,
 * and for a Python Function's node (PyNode, whose Python object is at the
 * op's tp_op_layout.node_object_offset in it) the type of that object.
 * Bounded reads, never a write; 0 when unreadable. Returns go through the
 * op programs.
 */
#include "bpf/common.bpf.h"

SEC("uprobe")
int autograd_enter(struct pt_regs *ctx)
{
	__u64 node = PT_REGS_PARM3(ctx);
	const struct tp_op_layout *l;
	struct tp_autograd_node_event *e;
	__u64 object = 0;
	__u32 op_id;

	e = (struct tp_autograd_node_event *)reserve_entry(ctx, EV_AUTOGRAD_NODE, sizeof(*e), &op_id);
	if (!e)
		return 0;
	e->node = node;
	e->vtable = 0;
	e->py_type = 0;
	if (bpf_probe_read_user(&e->vtable, sizeof(e->vtable), (void *)node))
		e->vtable = 0;
	/* A PyNode: Py_TYPE of its Python object, the word after the refcount. */
	l = bpf_map_lookup_elem(&op_layouts, &op_id);
	if (l && l->node_object_offset &&
	    !bpf_probe_read_user(&object, sizeof(object), (void *)(node + l->node_object_offset)) && object &&
	    bpf_probe_read_user(&e->py_type, sizeof(e->py_type), (void *)(object + 8)))
		e->py_type = 0;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}
