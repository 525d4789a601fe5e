/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* --python-stacks: the Python stack under an op or range entry, read from
 * the interpreter's frames (read only) by the process' layout (py_layouts,
 * struct tp_py_layout). Included by common.bpf.h, whose entry paths call
 * py_stack_before_entry when cfg.python_stacks is set.
 *
 * Walked once per op called from Python, not once per op: an entry deeper
 * on the C stack (a lower SP) than the one that walked last, with the same
 * innermost frame at the same instruction, is below that op (no bytecode
 * ran in between), so it shares its stack and sends nothing. Ops of a
 * thread without Python (autograd's engine threads) send one empty stack.
 *
 * A thread's PyThreadState is found once, by walking the interpreter's
 * thread states for the one whose thread_id (pthread_self(): the thread's
 * fs base on x86-64) is the thread's, namespace-proof, and kept per thread
 * (py_threads: userspace deletes a thread's entry when it exits). A thread
 * without one is asked again after TP_PY_RETRY_NS (it may take the GIL later). */
#ifndef TORCHPROBE_PYTHON_STACK_BPF_H
#define TORCHPROBE_PYTHON_STACK_BPF_H

#include <bpf/bpf_core_read.h>

#define TP_PY_RETRY_NS 100000000ull

/* Per traced tgid: its interpreter's layout. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TP_MAX_PIDS);
	__type(key, __u32);
	__type(value, struct tp_py_layout);
} py_layouts SEC(".maps") __weak;

/* Per thread (pid_tgid). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct tp_py_thread);
} py_threads SEC(".maps") __weak;

struct py_scratch {
	struct tp_py_stack_event event;
	__u64 frame[16];  /* the first TP_PY_FRAME_READ bytes of a frame */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_scratch);
} py_scratch SEC(".maps") __weak;

static __always_inline __u64 py_read_ptr(__u64 address)
{
	__u64 value = 0;

	if (bpf_probe_read_user(&value, sizeof(value), (const void *)address))
		return 0;
	return value;
}

/* bpf_loop walks (the verifier checks a callback once, not each turn). */
struct py_find_ctx {
	__u64 thread_id, next;  /* the layout's offsets */
	__u64 self;
	__u64 tstate;
	__u64 found;
};

static long py_find_turn(__u32 index, void *data)
{
	struct py_find_ctx *c = data;

	if (!c->tstate)
		return 1;
	if (py_read_ptr(c->tstate + c->thread_id) == c->self) {
		c->found = c->tstate;
		return 1;
	}
	c->tstate = py_read_ptr(c->tstate + c->next);
	return 0;
}

/* The thread state whose thread_id is `self`, or 0. */
static __always_inline __u64 py_find_tstate(const struct tp_py_layout *layout, __u64 self)
{
	__u64 interp = py_read_ptr(layout->interp_head);
	struct py_find_ctx c = {.thread_id = layout->tstate_thread_id, .next = layout->tstate_next, .self = self};

	if (!interp)
		return 0;
	c.tstate = py_read_ptr(interp + layout->threads_head);
	bpf_loop(TP_PY_MAX_THREADS, py_find_turn, &c, 0);
	return c.found;
}

struct py_walk_ctx {
	__u64 code, previous, instr, owner, adaptive, cstack;  /* the layout's */
	__u64 frame;  /* the next frame to read; 0 at the outermost */
	__u32 depth;
	__u32 truncated;
};

static long py_walk_turn(__u32 index, void *data)
{
	struct py_walk_ctx *c = data;
	struct tp_py_frame *out;
	struct py_scratch *s;
	__u32 zero = 0;
	__u64 code, at;
	__u8 owner;

	s = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!c->frame || !s)
		return 1;
	if (bpf_probe_read_user(s->frame, TP_PY_FRAME_READ, (const void *)c->frame)) {
		c->frame = 0;
		return 1;
	}
	/* Userspace checked every offset against TP_PY_FRAME_READ; the masks
	 * keep the verifier inside the (larger) buffer. */
	owner = ((__u8 *)s->frame)[c->owner & 127];
	code = s->frame[(c->code >> 3) & 15];
	at = s->frame[(c->instr >> 3) & 15];
	c->frame = s->frame[(c->previous >> 3) & 15];
	if (owner == c->cstack || !code)
		return 0;
	if (c->depth >= TP_PY_MAX_FRAMES) {
		c->truncated = 1;
		return 1;
	}
	out = &s->event.frames[c->depth & (TP_PY_MAX_FRAMES - 1)];
	out->code = code;
	out->lasti = (__s32)((__s64)(at - code - c->adaptive) >> 1);  /* code units; BPF has no signed division */
	out->pad = 0;
	c->depth++;
	return 0;
}

static __always_inline void py_send_empty(struct tp_py_thread *th, __u64 pid_tgid, __u64 ts, __u16 flags)
{
	struct tp_py_stack_event *e;

	th->frame = 0;
	if (th->sent_empty)
		return;
	e = reserve_op_record(EV_PY_STACK, offsetof(struct tp_py_stack_event, frames), pid_tgid, ts);
	if (!e)
		return;
	e->depth = 0;
	e->flags = flags;
	e->pad = 0;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	th->sent_empty = 1;
}

/* Sends the thread's Python stack ahead of an entry at stack pointer `sp`
 * when it is not the one sent last. */
static __noinline int py_stack_before_entry(__u64 pid_tgid, __u64 sp, __u64 ts)
{
	__u32 tgid = pid_tgid >> 32, zero = 0;
	struct tp_py_layout *layout = bpf_map_lookup_elem(&py_layouts, &tgid);
	struct tp_py_thread *th, fresh = {};
	struct py_scratch *s;
	__u64 frame, instr;
	__u32 depth, size;
	bool truncated;

	if (!layout)
		return 0;
	th = bpf_map_lookup_elem(&py_threads, &pid_tgid);
	if (!th) {
		bpf_map_update_elem(&py_threads, &pid_tgid, &fresh, BPF_NOEXIST);
		th = bpf_map_lookup_elem(&py_threads, &pid_tgid);
		if (!th)
			return 0;
	}
	if (!th->tstate) {
		struct task_struct *task;

		if (th->checked_ns && ts - th->checked_ns < TP_PY_RETRY_NS) {
			py_send_empty(th, pid_tgid, ts, PY_STACK_NO_THREAD);
			return 0;
		}
		th->checked_ns = ts;
		task = (struct task_struct *)bpf_get_current_task();
		th->tstate = py_find_tstate(layout, BPF_CORE_READ(task, thread.fsbase));
		if (!th->tstate) {
			py_send_empty(th, pid_tgid, ts, PY_STACK_NO_THREAD);
			return 0;
		}
	}
	if (layout->tstate_cframe == TP_PY_NO_CFRAME)
		frame = py_read_ptr(th->tstate + layout->current_frame);
	else
		frame = py_read_ptr(py_read_ptr(th->tstate + layout->tstate_cframe) + layout->current_frame);
	s = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!frame || !s) {
		py_send_empty(th, pid_tgid, ts, 0);
		return 0;
	}
	instr = py_read_ptr(frame + layout->frame_instr);
	if (frame == th->frame && instr == th->instr && sp < th->sp)
		return 0;  /* below the op that walked last: its stack */
	struct py_walk_ctx walk = {
		.code = layout->frame_code, .previous = layout->frame_previous, .instr = layout->frame_instr,
		.owner = layout->frame_owner, .adaptive = layout->code_adaptive, .cstack = layout->owner_cstack,
		.frame = frame,
	};

	bpf_loop(TP_PY_MAX_FRAMES + 8, py_walk_turn, &walk, 0);
	depth = walk.depth;
	truncated = walk.truncated || walk.frame;
	s->event.depth = depth;
	s->event.flags = truncated ? PY_STACK_TRUNCATED : 0;
	s->event.pad = 0;
	size = offsetof(struct tp_py_stack_event, frames) + depth * sizeof(struct tp_py_frame);
	fill_header(&s->event.hdr, EV_PY_STACK, size, pid_tgid, ts);
	if (size > sizeof(s->event) ||
	    bpf_ringbuf_output(&events, &s->event, size, BPF_RB_NO_WAKEUP)) {
		count_drop(DROP_RINGBUF_FULL);
		return 0;  /* the next entry walks again */
	}
	th->frame = frame;
	th->instr = instr;
	th->sp = sp;
	th->sent_empty = 0;
	return 0;
}

#endif /* TORCHPROBE_PYTHON_STACK_BPF_H */
