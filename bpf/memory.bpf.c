// SPDX-License-Identifier: GPL-2.0
/*
 * The --memory probe set: libc10's CPU allocator.
 *  - alloc_enter on c10::alloc_cpu(size) keeps the size for its thread;
 *  - alloc_return on each of its `ret`s (RAX holds the pointer) emits
 *    EV_MEM_ALLOC with both. `ret` probes, not a uretprobe: alloc_cpu throws
 *    when memory runs out, and a uretprobe's trampoline on the stack would
 *    turn that exception into std::terminate in a process not guarded by
 *    the keeper;
 *  - free_enter on c10::free_cpu(ptr) emits EV_MEM_FREE with glibc's chunk
 *    size word, read (never written) before free() can reuse it: what sizes
 *    a free of memory allocated before tracing began.
 *  - device_report on c10::reportMemoryUsageToProfiler: what CUDA's caching
 *    allocator reports of each block (CPU reports are skipped: they come
 *    only while PyTorch's profiler runs, and alloc_cpu sees them all).
 *  - segment_enter/segment_return on cudaMalloc(void **ptr, size_t size),
 *    segment_free on cudaFree(ptr): the device memory the caching allocator
 *    takes from and gives back to the CUDA runtime underneath its blocks.
 * Memory events go to the op ring, after the same pid filter and gate as
 * op entries, so each stays in order with its thread's ops; when the ring
 * is full they are counted apart (DROP_MEM_FULL).
 */
#include "bpf/common.bpf.h"

/* Size asked of alloc_cpu, per thread, until it returns. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);   /* pid_tgid */
	__type(value, __u64); /* bytes */
} alloc_sizes SEC(".maps");

static __always_inline void emit_mem(__u16 type, __u64 pid_tgid, __u64 address, __u64 bytes)
{
	struct tp_mem_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_drop(DROP_MEM_FULL);
		return;
	}
	fill_header(&e->hdr, type, sizeof(*e), pid_tgid, bpf_ktime_get_ns());
	e->address = address;
	e->bytes = bytes;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

SEC("uprobe")
int alloc_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 bytes = PT_REGS_PARM1(ctx);

	if (!lone_event_passes(pid_tgid))
		return 0;
	/* --python-stacks: the line that allocated (inside an op, the walk
	 * finds the op's stack already sent and sends nothing). */
	if (cfg.python_stacks)
		py_stack_before_entry(pid_tgid, PT_REGS_SP(ctx) + 8, bpf_ktime_get_ns());
	bpf_map_update_elem(&alloc_sizes, &pid_tgid, &bytes, BPF_ANY);
	return 0;
}

SEC("uprobe")
int alloc_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 *bytes = bpf_map_lookup_elem(&alloc_sizes, &pid_tgid);
	__u64 size;

	if (!bytes)
		return 0;  /* entered before the trace, or the gate was closed */
	size = *bytes;
	bpf_map_delete_elem(&alloc_sizes, &pid_tgid);
	if (!lone_event_passes(pid_tgid))
		return 0;
	emit_mem(EV_MEM_ALLOC, pid_tgid, PT_REGS_RC(ctx), size);
	return 0;
}

SEC("uprobe")
int free_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 address = PT_REGS_PARM1(ctx);
	__u64 chunk = 0;

	if (!address || !lone_event_passes(pid_tgid))
		return 0;
	if (bpf_probe_read_user(&chunk, sizeof(chunk), (void *)(address - 8)))
		chunk = 0;
	emit_mem(EV_MEM_FREE, pid_tgid, address, chunk);
	return 0;
}

/* cudaMalloc's arguments, per thread, until it returns. */
struct segment_call {
	__u64 out;    /* void **: where the runtime writes the pointer */
	__u64 bytes;
};
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);  /* pid_tgid */
	__type(value, struct segment_call);
} segment_calls SEC(".maps");

SEC("uprobe")
int segment_enter(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct segment_call call = {PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx)};

	if (!lone_event_passes(pid_tgid))
		return 0;
	bpf_map_update_elem(&segment_calls, &pid_tgid, &call, BPF_ANY);
	return 0;
}

SEC("uprobe")
int segment_return(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct segment_call *call = bpf_map_lookup_elem(&segment_calls, &pid_tgid);
	__u64 out, bytes, address = 0;

	if (!call)
		return 0;
	out = call->out;
	bytes = call->bytes;
	bpf_map_delete_elem(&segment_calls, &pid_tgid);
	/* cudaSuccess is 0; the pointer is read, never written */
	if (PT_REGS_RC(ctx) != 0 || !lone_event_passes(pid_tgid) ||
	    bpf_probe_read_user(&address, sizeof(address), (void *)out) || !address)
		return 0;
	emit_mem(EV_SEGMENT_ALLOC, pid_tgid, address, bytes);
	return 0;
}

SEC("uprobe")
int segment_free(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 address = PT_REGS_PARM1(ctx);

	if (address && lone_event_passes(pid_tgid))
		emit_mem(EV_SEGMENT_FREE, pid_tgid, address, 0);
	return 0;
}

#define TP_DEVICE_CPU 0  /* c10::DeviceType::CPU */

SEC("uprobe")
int device_report(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 device = PT_REGS_PARM5(ctx);  /* c10::Device {int8 type, int8 index}, in a register */
	struct tp_device_mem_event *e;

	if ((__u8)device == TP_DEVICE_CPU || !lone_event_passes(pid_tgid))
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_drop(DROP_MEM_FULL);
		return 0;
	}
	fill_header(&e->hdr, EV_DEVICE_MEM, sizeof(*e), pid_tgid, bpf_ktime_get_ns());
	e->address = PT_REGS_PARM1(ctx);
	e->bytes = (__s64)PT_REGS_PARM2(ctx);
	e->total_allocated = PT_REGS_PARM3(ctx);
	e->total_reserved = PT_REGS_PARM4(ctx);
	e->device_type = (__u8)device;
	e->device_index = (__s8)(device >> 8);
	__builtin_memset(e->pad, 0, sizeof(e->pad));
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

