// SPDX-License-Identifier: GPL-2.0
/*
 * The ops (userspace/discover/op_probes.h), one program each way:
 *  - op_enter/op_return: on the first instruction and on every `ret` of
 *    every at::_ops::<op>::call (cookie = op id, TP_COOKIE_SHARED_RET set on
 *    a return it shares with other callers): the returns route that needs no
 *    help from userspace, at ~10x the cost of a uretprobe (op_uret, with
 *    on_throw and list_returns to keep the target's exceptions working:
 *    bpf/uretprobe_returns.bpf.c);
 *  - on_catch: libstdc++'s __cxa_begin_catch, so that ops an exception
 *    unwound are closed where it was caught.
 * Every op program passes the gate (ctl map) first: the trace ends when
 * userspace says, not when the probes are finally removed. The plain entry
 * reads nothing but its cookie: the other capabilities' entries (boxed,
 * CUDA, collectives, autograd nodes, shapes) are programs of their own.
 */
#include "bpf/common.bpf.h"

/* At the first instruction and at `ret`, SP points at the return address:
 * the frame is the slot above it. */
SEC("uprobe")
int op_enter(struct pt_regs *ctx)
{
	return emit_op(ctx, EV_OP_ENTER, PT_REGS_SP(ctx) + 8);
}

SEC("uprobe")
int op_return(struct pt_regs *ctx)
{
	return emit_op(ctx, EV_OP_EXIT, PT_REGS_SP(ctx) + 8);
}

/* In the op ring, so it stays in order with the thread's op events. */
SEC("uprobe")
int on_catch(struct pt_regs *ctx)
{
	return emit_op(ctx, EV_OP_UNWIND, PT_REGS_SP(ctx) + 8);
}

char LICENSE[] SEC("license") = "GPL";
