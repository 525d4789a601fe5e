// SPDX-License-Identifier: GPL-2.0
/*
 * Annotations: record_function ranges (the user's own, and PyTorch's:
 * Optimizer.step#SGD.step, DataLoader's __next__), with no profiler running.
 *
 * Python's record_function.__enter__ calls the dispatcher op
 * profiler::_record_function_enter (1.13) or _enter_new (2.x), whose kernel
 * builds an at::RecordFunction with RecordScope::USER_SCOPE and, only when a
 * profiler listens, gives it the name (RecordFunction::before is never
 * reached otherwise). __exit__ ends it with RecordFunction::end(). 1.13's
 * kernel is not exported, so no one exported function gets both the name and
 * the record on both versions; three exported ones together do, read-only:
 *  - annot_probe(NAME) on c10::ivalue::ConstantString::create(std::string)
 *    (how the Python binding turns the `str name` argument into the op's
 *    IValue, both versions) and on torch::autograd::profiler::
 *    record_function_enter_new(const std::string&, ...) (the 2.x kernel,
 *    exported: it names the range exactly): the string is kept per thread;
 *  - annot_probe(BEGIN) on at::RecordFunction::RecordFunction(RecordScope)
 *    with USER_SCOPE: the range begins, named by the string its thread kept
 *    last (then forgotten); its record's address is remembered;
 *  - annot_probe(END) on at::RecordFunction::end() of a remembered record:
 *    the range ends (every other record's end() is one map lookup);
 *  - annot_probe(C_BEGIN) on at::RecordFunction::before(const char*, long):
 *    2.x's dynamo opens `Torch-Compiled Region: G/F` and `TorchDynamo Cache
 *    Lookup` from C through _pytorch_record_function_enter (libtorch_python),
 *    which calls it, profiler or not: named and begun there. With a
 *    profiler listening, RECORD_FUNCTION's named ranges reach it too.
 * On 1.13 a record_function given `args` is named by its args string (the
 * last one made before the record): a limit of this route, said in README.
 *
 * The flight recorder's light tier probes none of the hot three (1.13 builds
 * a RecordFunction at every RECORD_FUNCTION site, profiler or not: a trap
 * per autograd node and per RECORD_FUNCTION in the optimizer), only
 * annot_probe(MARK) on the function that passes a name (the binding's
 * ConstantString::create, else 2.x's record_function_enter_new): each name is
 * sent at once as a mark, which userspace keeps when it is a step marker.
 */
#include "bpf/common.bpf.h"

#define ANNOT_USER_SCOPE 7  /* at::RecordScope::USER_SCOPE, 1.13 to 2.6 */
/* Kept in annot_names only: the thread's name was given to a range (the
 * next range needs a name of its own), so the thread has passed one since
 * the probes went live. */
#define ANNOT_NAME_CONSUMED 0x80

struct annot_name {
	__u16 len;
	__u8 flags;
	__u8 pad[5];
	char name[TP_ANNOT_NAME_MAX];
};

/* The name each thread passed last (tid -> name), or that it passed one
 * since the probes went live (ANNOT_NAME_CONSUMED); LRU: a thread that dies
 * with one kept cannot fill the map. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct annot_name);
} annot_names SEC(".maps");

/* Ranges open now: RecordFunction address -> tid that began it. LRU: a
 * record never ended (its process killed) is forgotten, and a range whose
 * entry was evicted is closed, marked, when the trace stops. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} annot_open SEC(".maps");

/* Scratch for a name being read (too big for the BPF stack with the rest). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct annot_name);
} annot_scratch SEC(".maps");

/* libstdc++'s std::string: {char *data; size_t size; ...}. */
static __always_inline void annot_keep_name(__u32 tid, const void *str)
{
	__u32 zero = 0;
	struct annot_name *n = bpf_map_lookup_elem(&annot_scratch, &zero);
	__u64 head[2];
	__u64 len;

	if (!n)
		return;
	n->flags = 0;
	n->len = 0;
	if (bpf_probe_read_user(head, sizeof(head), str) != 0) {
		n->flags = ANNOT_NAME_FAULT;
	} else {
		len = head[1];
		if (len > TP_ANNOT_NAME_MAX) {
			len = TP_ANNOT_NAME_MAX;
			n->flags = ANNOT_NAME_TRUNCATED;
		}
		if (len && bpf_probe_read_user(n->name, len, (const void *)head[0]) != 0)
			n->flags = ANNOT_NAME_FAULT;
		else
			n->len = len;
	}
	bpf_map_update_elem(&annot_names, &tid, n, BPF_ANY);
}

/* A C string name (ANNOT_PROBE_C_BEGIN), kept as annot_keep_name keeps one. */
static __always_inline void annot_keep_c_name(__u32 tid, const char *str)
{
	__u32 zero = 0;
	struct annot_name *n = bpf_map_lookup_elem(&annot_scratch, &zero);
	long len;

	if (!n)
		return;
	n->flags = 0;
	n->len = 0;
	len = bpf_probe_read_user_str(n->name, TP_ANNOT_NAME_MAX, str);
	if (len <= 0) {
		n->flags = ANNOT_NAME_FAULT;
	} else {
		n->len = len - 1;  /* without its NUL */
		if (len == TP_ANNOT_NAME_MAX)
			n->flags = ANNOT_NAME_TRUNCATED;
	}
	bpf_map_update_elem(&annot_names, &tid, n, BPF_ANY);
}

/* A range begins at `record`, named by what its thread kept last; or, when
 * `mark`, a name was passed (ANNOT_PROBE_MARK): the event says so, and no
 * end will follow. */
static __always_inline void annot_begin(__u64 pid_tgid, __u64 record, __u64 ts, bool mark)
{
	__u32 tid = (__u32)pid_tgid;
	struct annot_name *n = bpf_map_lookup_elem(&annot_names, &tid);
	struct tp_annot_begin *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_drop(DROP_RINGBUF_FULL);
		return;
	}
	fill_header(&e->a.hdr, EV_ANNOT_BEGIN, sizeof(*e), pid_tgid, ts);
	e->a.record = record;
	e->a.begin_tid = tid;
	e->a.pad = 0;
	if (n && !(n->flags & ANNOT_NAME_CONSUMED)) {
		e->a.name_len = n->len;
		e->a.name_flags = n->flags;
		__builtin_memcpy(e->name, n->name, TP_ANNOT_NAME_MAX);
		n->len = 0;
		n->flags = ANNOT_NAME_CONSUMED;
	} else {
		e->a.name_len = 0;
		e->a.name_flags = ANNOT_NAME_UNSEEN;
		if (!n) {
			/* No name on this thread since the probes went live: it
			 * was passed before them. Said once per thread. */
			__u32 zero = 0;
			struct annot_name *consumed = bpf_map_lookup_elem(&annot_scratch, &zero);

			e->a.name_flags |= ANNOT_NAME_BEFORE_TRACE;
			if (consumed) {
				consumed->len = 0;
				consumed->flags = ANNOT_NAME_CONSUMED;
				bpf_map_update_elem(&annot_names, &tid, consumed, BPF_ANY);
			}
		}
	}
	if (mark)
		e->a.name_flags |= ANNOT_NAME_MARK;
	else
		bpf_map_update_elem(&annot_open, &record, &tid, BPF_ANY);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

static __always_inline void annot_end(__u64 pid_tgid, __u64 record, __u64 ts)
{
	__u32 *tid = bpf_map_lookup_elem(&annot_open, &record);
	struct tp_annot_event *e;
	__u32 begin_tid;

	if (!tid)
		return;  /* a record no range began: most are */
	begin_tid = *tid;
	bpf_map_delete_elem(&annot_open, &record);
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(DROP_RINGBUF_FULL);
		return;
	}
	fill_header(&e->hdr, EV_ANNOT_END, sizeof(*e), pid_tgid, ts);
	e->record = record;
	e->begin_tid = begin_tid;
	e->name_len = 0;
	e->name_flags = 0;
	e->pad = 0;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

SEC("uprobe")
int annot_probe(struct pt_regs *ctx)
{
	__u64 ts = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 kind = bpf_get_attach_cookie(ctx);
	struct tp_ctl *c = get_ctl();
	__u32 gate = c ? c->gate : GATE_OPEN;

	if (cfg.filter_pids && !is_traced(pid_tgid >> 32))
		return 0;
	/* Like ops: ranges begin only while the gate is open; they end while
	 * the ranges still open may end. */
	if (kind == ANNOT_PROBE_END) {
		if (gate != GATE_CLOSED)
			annot_end(pid_tgid, PT_REGS_PARM1(ctx), ts);
		return 0;
	}
	/* Both name functions return a class by value (an intrusive_ptr): its
	 * address comes first (rdi), the std::string's second. A name is kept
	 * whatever the gate says (it emits nothing): a range whose name was
	 * passed just before the gate opened (attached by pid, the gate opens
	 * once every link is live) begins named, not "unseen". */
	if (kind == ANNOT_PROBE_NAME) {
		annot_keep_name((__u32)pid_tgid, (const void *)PT_REGS_PARM2(ctx));
		return 0;
	}
	if (gate != GATE_OPEN)
		return 0;
	if (kind == ANNOT_PROBE_MARK) {
		annot_keep_name((__u32)pid_tgid, (const void *)PT_REGS_PARM2(ctx));
		annot_begin(pid_tgid, 0, ts, true);
		return 0;
	}
	/* RecordScope is a uint8_t enum: the register's upper bytes are not it. */
	if (kind == ANNOT_PROBE_BEGIN && (PT_REGS_PARM2(ctx) & 0xff) != ANNOT_USER_SCOPE)
		return 0;
	if (kind != ANNOT_PROBE_BEGIN && kind != ANNOT_PROBE_C_BEGIN)
		return 0;
	if (cfg.python_stacks)
		py_stack_before_entry(pid_tgid, PT_REGS_SP(ctx) + 8, ts);
	/* before(this, const char* name, ...): named and begun at once. */
	if (kind == ANNOT_PROBE_C_BEGIN)
		annot_keep_c_name((__u32)pid_tgid, (const char *)PT_REGS_PARM2(ctx));
	annot_begin(pid_tgid, PT_REGS_PARM1(ctx), ts, false);
	return 0;
}

