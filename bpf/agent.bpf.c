// SPDX-License-Identifier: GPL-2.0
/*
 * `torchprobe agent`'s discovery, an object of its own (no probes on any
 * target): every exec on the host, as an event on one ring buffer, from a
 * BTF tracepoint (no kprobes, no tracefs needed). Userspace then looks at
 * the new program's maps a few times as it starts. A library-load hook
 * (fentry on security_mmap_file or do_mmap, for `import torch` long after
 * the exec) was refused on this project's kernel (EPERM at load), and no
 * tracepoint names the file an mmap maps, so late imports are found by the
 * agent's /proc walk.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/events.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} agent_events SEC(".maps");

static __always_inline void emit_agent(__u16 type)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct tp_agent_event *e = bpf_ringbuf_reserve(&agent_events, sizeof(*e), 0);

	if (!e)
		return;  /* a full ring: the /proc walk finds the process */
	e->hdr.type = type;
	e->hdr.size = sizeof(*e);
	e->hdr.pid = pid_tgid >> 32;
	e->hdr.tid = (__u32)pid_tgid;
	e->hdr.cpu = bpf_get_smp_processor_id();
	e->hdr.ts_ns = bpf_ktime_get_ns();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(agent_exec, struct task_struct *task)
{
	emit_agent(EV_AGENT_EXEC);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
