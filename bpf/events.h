/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one ABI shared by the BPF programs and the userspace decoder.
 *
 * Every record in a ring buffer starts with struct tp_event_header so the
 * decoder can skip a type it does not know by its size. Fixed-width fields
 * only, explicit padding. Every timestamp is bpf_ktime_get_ns(): nanoseconds
 * of CLOCK_MONOTONIC.
 */
#ifndef TORCHPROBE_BPF_EVENTS_H
#define TORCHPROBE_BPF_EVENTS_H

#ifdef __BPF__
/* vmlinux.h provides the __u* types in BPF programs. */
#else
#include <linux/types.h>
#endif

enum tp_event_type {
	EV_OP_ENTER = 1,   /* an at::_ops::<op>::call was entered */
	EV_OP_EXIT = 2,    /* ... and returned */
	EV_LIB_LOAD = 3,   /* the dynamic loader announced a (un)load; process stopped */
	EV_PROC_FORK = 4,  /* a traced process forked a new process */
	EV_PROC_EXIT = 5,  /* a thread of a traced process exited */
	EV_OP_UNWIND = 6,  /* a C++ handler caught an exception (__cxa_begin_catch):
			    * ops on frames at or below `frame` were unwound */
	EV_PROC_EXEC = 7,  /* a traced process exec'd a new program */
	EV_OP_RESTORED = 8, /* an exception is about to unwind the thread's stack:
			     * the return addresses of its open ops were given back
			     * (uretprobe returns), so none of them reports a return;
			     * op_id = how many, frame = the throw's */
	EV_MEM_ALLOC = 9,  /* c10::alloc_cpu returned: struct tp_mem_event */
	EV_MEM_FREE = 10,  /* c10::free_cpu was called: struct tp_mem_event */
	EV_DEVICE_MEM = 11, /* a device allocator (CUDA's caching allocator) reported a
			     * block malloc or free: struct tp_device_mem_event */
	EV_SEGMENT_ALLOC = 12, /* cudaMalloc succeeded: struct tp_mem_event */
	EV_SEGMENT_FREE = 13,  /* cudaFree was called: struct tp_mem_event (bytes 0) */
	EV_BOXED_ENTER = 14, /* a copy of Dispatcher::callBoxed was entered
			     * (struct tp_boxed_event); it returns as an op */
	EV_ANNOT_BEGIN = 15, /* a record_function range began (tp_annot_begin) */
	EV_ANNOT_END = 16,  /* ... and ended (tp_annot_event) */
	EV_CUDA_CALL = 17, /* a CUDA/NCCL call was entered: an op entry with the
			    * call's arguments (tp_cuda_call_event) */
	EV_AGENT_EXEC = 18, /* agent.bpf.c: some process exec'd (tp_agent_event) */
	EV_OP_SHAPES = 19, /* --shapes: an op entry with its first Tensor
			    * arguments' metadata (tp_op_shapes_event) */
	EV_COLLECTIVE = 20, /* a c10d collective was entered: an op entry with its
			     * group and tensors (tp_collective_event) */
	EV_AUTOGRAD_NODE = 21, /* autograd's Engine::evaluate_function was entered: an
				* op entry with the node it runs (tp_autograd_node_event) */
	EV_OOM = 22,       /* c10 is about to raise an error that may be running out of
			    * memory (bpf/oom.bpf.c): struct tp_oom_event */
	EV_PY_STACK = 23,  /* --python-stacks: the Python stack the thread's next op
			    * entries share (bpf/python_stack.bpf.h): struct
			    * tp_py_stack_event, depth frames long */
	EV_OFFCPU = 24,    /* --sched: a traced thread is back on a CPU after time off
			    * it (bpf/sched.bpf.c): struct tp_offcpu_event */
};

/* What the probes may emit: the one value of the "ctl" array map. Zero is
 * the state at load, so probes record from the moment they are attached. */
enum tp_gate {
	GATE_OPEN = 0,          /* every event */
	GATE_RETURNS_ONLY = 1,  /* stopping: no new op, but returns and unwinds of
				 * the ops still open */
	GATE_CLOSED = 2,        /* nothing; hits are only counted per op
				 * (gated_hits), so probes are removed hottest first */
};

/* What EV_OOM saw (bpf/oom.bpf.c). */
enum tp_oom_kind {
	TP_OOM_ENFORCE = 1,  /* c10::ThrowEnforceNotMet(file, line, ...): a CAFFE_ENFORCE
			      * failed; alloc_cpu's when `file` is alloc_cpu.cpp */
	TP_OOM_DEVICE = 2,   /* c10::reportOutOfMemoryToProfiler(alloc_size, ...): a
			      * device caching allocator ran out */
};

/* Library-load watching (ctl.loads): see bpf dl_state. */
enum tp_loads {
	LOADS_IGNORE = 0,  /* no events */
	LOADS_WATCH = 1,   /* an event per load of a traced process */
	LOADS_HOLD = 2,    /* ... and the process is stopped until userspace has
			    * attached to what it loaded (launch mode), while
			    * its pids entry says PID_WAITING */
};

/* A traced process' entry in the pids map. */
enum tp_pid_state {
	PID_WAITING = 1,   /* its libtorch is not attached yet (a new process,
			    * or one that exec'd): with LOADS_HOLD it is held
			    * at its exec and at each library load */
	PID_ATTACHED = 2,  /* its libtorch is attached: its loads are only seen */
};

struct tp_ctl {
	__u32 gate;   /* enum tp_gate */
	__u32 loads;  /* enum tp_loads */
};

/* The programs' rodata ("cfg" in bpf/common.bpf.h), set by userspace before load. */
struct tp_cfg {
	bool filter_pids;   /* check the pids map (launch mode; pid mode filters in the link) */
	bool follow_forks;  /* add processes forked by traced ones to the pids map */
	bool hold_forks;    /* ... and hold each stopped until userspace has attached it */
	bool python_stacks; /* op and range entries walk the Python stack (py_layouts) */
};

/* Why an event was lost; index into the per-CPU "drops" array map. */
enum tp_drop_reason {
	DROP_RINGBUF_FULL = 0,  /* op ring buffer had no room */
	DROP_CTL_FULL = 1,      /* control ring buffer had no room */
	DROP_MEM_FULL = 2,      /* op ring buffer had no room for a memory event */
	DROP_NR = 3,
};

struct tp_event_header {
	__u16 type;     /* enum tp_event_type */
	__u16 size;     /* bytes of the whole record, header included */
	__u32 pid;      /* thread group id (userspace "pid") */
	__u32 tid;      /* thread id */
	__u32 cpu;      /* CPU the event was recorded on */
	__u64 ts_ns;    /* bpf_ktime_get_ns(), CLOCK_MONOTONIC ns */
};

struct tp_op_event {
	struct tp_event_header hdr;
	__u32 op_id;    /* probe cookie: index into userspace's op table */
	__u32 pad;
	__u64 frame;    /* user stack address of the call: the stack pointer before
			 * the call instruction pushed the return address (SP + 8 at
			 * the first instruction and at `ret`), the same at entry and
			 * return. Callers' frames are above their callees': it tells
			 * nesting when an entry or a return was not seen. */
};

/* The boxed path: which operator a copy of Dispatcher::callBoxed was called
 * for, read from its OperatorHandle (bpf/boxed.bpf.h). Names longer than
 * their field are cut (userspace counts them); "" when unreadable. */
#define TP_OP_NAME_LEN 64
struct tp_boxed_event {
	struct tp_event_header hdr;
	__u32 op_id;    /* probe cookie of the copy: its returns carry it too */
	__u32 pad;
	__u64 frame;    /* as tp_op_event.frame */
	__u64 def;      /* address of the c10::Dispatcher::OperatorDef */
	char name[TP_OP_NAME_LEN];      /* "aten::mm" */
	char overload[TP_OP_NAME_LEN];  /* "out", "" for the default overload */
};

struct tp_proc_event {
	struct tp_event_header hdr;  /* pid/tid: the exiting thread or forking parent */
	union {
		__u32 child_pid;     /* EV_PROC_FORK: the new process' tgid */
		__u32 exit_code;     /* EV_PROC_EXIT: as wait(2) reports it (a fatal signal in
				      * the low 7 bits, 0x80 a core dump; else status << 8):
				      * the group's code once the group exits, the thread's
				      * own before */
	};
	__u16 is_leader;             /* EV_PROC_EXIT: 1 when the thread group leader exits */
	__u16 child_held;            /* EV_PROC_FORK: 1 when the child is held stopped (SIGSTOP
				      * before its first instruction) until userspace attaches */
	char comm[16];               /* task comm (thread name) at the time of the event */
};

/* One CPU allocation or free (the --memory probe set, bpf/allocator.bpf.h),
 * in the op ring so that it stays in order with its thread's op events. */
struct tp_mem_event {
	struct tp_event_header hdr;
	__u64 address;  /* the pointer alloc_cpu returned / free_cpu was given */
	__u64 bytes;    /* EV_MEM_ALLOC: the size asked for. EV_MEM_FREE: glibc's
			 * chunk size word (the 8 bytes before `address`), read
			 * before the free; 0 when it could not be read */
};

/* An EV_OOM event (bpf/oom.bpf.c). */
#define TP_OOM_FILE_LEN 112
struct tp_oom_event {
	struct tp_event_header hdr;
	__s64 bytes;     /* TP_OOM_DEVICE: the size asked for */
	__s32 line;      /* TP_OOM_ENFORCE: the failed check's line */
	__u16 kind;      /* enum tp_oom_kind */
	__u16 file_len;  /* TP_OOM_ENFORCE: bytes of `file` read (its NUL not counted) */
	char file[TP_OOM_FILE_LEN];  /* TP_OOM_ENFORCE: the check's __FILE__, its first bytes */
};

/* c10::reportMemoryUsageToProfiler(ptr, alloc_size, total_allocated,
 * total_reserved, device), which CUDA's caching allocator calls on every
 * block malloc (alloc_size > 0) and free (< 0), profiler or not. */
struct tp_device_mem_event {
	struct tp_event_header hdr;
	__u64 address;
	__s64 bytes;            /* > 0 allocated, < 0 freed */
	__u64 total_allocated;  /* the allocator's own totals for the device, after it */
	__u64 total_reserved;
	__u8 device_type;       /* c10::DeviceType (1: CUDA) */
	__s8 device_index;
	__u8 pad[6];
};

#define TP_MAX_PIDS 1024  /* traced processes at once (pids map entries) */
#define TP_MAX_OPS 65536  /* op ids (probe cookies) with a gated hit counter */
/* Set in a return probe's cookie (op id | flag) when the `ret` is in a
 * function the op reaches by tail call: other callers may return there too,
 * so a return that closes no open op of that id is not one. The one flag a
 * cookie carries: it passes through the return programs' hot path into the
 * event's op_id without a map lookup. Every other per-op datum is in the
 * op_layouts map (tp_op_layout), read only by the programs that need it. */
#define TP_COOKIE_SHARED_RET 0x80000000u
#define TP_BENCH_BURST 4096  /* events one run of the bench_burst program emits */
/* Pending uretprobe returns of one thread, as the kernel lists them: at most
 * MAX_URETPROBE_DEPTH (64), beyond which the kernel sets no more. */
#define TP_MAX_RETURNS 64

/* The return addresses the kernel replaced with its trampoline on one thread:
 * a fix request (throw) or one thread of a listing (releasing a process). */
struct tp_return_slots {
	__u32 tid;
	__u32 count;        /* valid entries of slot/orig */
	__u64 trampoline;   /* user address of the uretprobe trampoline */
	__u32 signal;       /* fix request: the signal that stopped the thread */
	__u32 pad;
	__u64 slot[TP_MAX_RETURNS];  /* stack address holding the trampoline */
	__u64 orig[TP_MAX_RETURNS];  /* ... and the return address it replaced */
};

/* Annotations (record_function ranges), see bpf/annotations.bpf.h. */
#define TP_ANNOT_NAME_MAX 128  /* name bytes carried; longer names are cut */

/* Attach cookies of annot_probe: which function it is on. */
enum tp_annot_probe {
	ANNOT_PROBE_NAME = 0,   /* passes a range's name (a std::string*) */
	ANNOT_PROBE_BEGIN = 1,  /* at::RecordFunction(RecordScope): a range may begin */
	ANNOT_PROBE_END = 2,    /* at::RecordFunction::end(): a range may end */
	ANNOT_PROBE_C_BEGIN = 3, /* at::RecordFunction::before(const char* name, ...): a range
				  * named by a C string begins (2.x's C shim for torch.compile's
				  * regions and cache lookups, _pytorch_record_function_enter) */
	ANNOT_PROBE_MARK = 4,   /* passes a range's name (a std::string*), the flight recorder's
				 * light tier: a step-boundary candidate, sent at once (the
				 * light tier probes neither the constructor nor end()) */
};

/* How an annotation's name was read (tp_annot_event.name_flags). */
enum tp_annot_name_flags {
	ANNOT_NAME_UNSEEN = 1,     /* no name was passed before the range began */
	ANNOT_NAME_FAULT = 2,      /* the name's bytes could not be read */
	ANNOT_NAME_TRUNCATED = 4,  /* longer than TP_ANNOT_NAME_MAX: cut */
	ANNOT_NAME_BEFORE_TRACE = 8,  /* with UNSEEN: its thread passed no name since the probes
				       * went live, so its name was passed before them (a range
				       * that began at the attach boundary) */
	ANNOT_NAME_MARK = 16,      /* a name passed (ANNOT_PROBE_MARK), not a range: no end follows */
};

/* EV_ANNOT_END as is; EV_ANNOT_BEGIN with the name after it. */
struct tp_annot_event {
	struct tp_event_header hdr;
	__u64 record;      /* address of the at::RecordFunction: pairs begin and end */
	__u32 begin_tid;   /* the thread that began the range (EV_ANNOT_END) */
	__u16 name_len;    /* bytes of name (EV_ANNOT_BEGIN) */
	__u8 name_flags;   /* enum tp_annot_name_flags (EV_ANNOT_BEGIN) */
	__u8 pad;
};

struct tp_annot_begin {
	struct tp_annot_event a;
	char name[TP_ANNOT_NAME_MAX];  /* not NUL-terminated: name_len bytes */
};

/* --python-stacks. Where a process' CPython keeps its threads' frames
 * (one py_layouts entry per traced tgid, written by userspace once it knows
 * the interpreter: userspace/discover/python_runtime.h). Offsets in bytes;
 * every frame field is 8-aligned but the owner byte, and lies in the first
 * TP_PY_FRAME_READ bytes of a frame. */
#define TP_PY_MAX_FRAMES 64     /* frames a stack keeps, innermost first */
#define TP_PY_MAX_THREADS 256   /* thread states a lookup walks */
#define TP_PY_FRAME_READ 80     /* bytes of a frame read at once */
#define TP_PY_NO_CFRAME 0xffff  /* tstate_cframe: the thread state holds the frame itself (3.13+) */
#define TP_PY_NO_OWNER 0xff     /* owner_cstack: no frame belongs to the C stack (3.11) */
struct tp_py_layout {
	__u64 interp_head;      /* address of _PyRuntime.interpreters.head in the process */
	__u16 threads_head;     /* PyInterpreterState: its first PyThreadState */
	__u16 tstate_next;      /* PyThreadState: the next one */
	__u16 tstate_thread_id; /* PyThreadState.thread_id: pthread_self(), the thread's fs base */
	__u16 tstate_cframe;    /* PyThreadState.cframe (3.11, 3.12), or TP_PY_NO_CFRAME */
	__u16 current_frame;    /* the innermost _PyInterpreterFrame, in the cframe or the thread state */
	__u16 frame_code;       /* _PyInterpreterFrame: f_code / f_executable */
	__u16 frame_previous;
	__u16 frame_instr;      /* prev_instr (3.11, 3.12) / instr_ptr (3.13) */
	__u16 frame_owner;      /* the owner byte */
	__u16 code_adaptive;    /* PyCodeObject.co_code_adaptive: the first code unit */
	__u8 owner_cstack;      /* owner of the C stack's shim frames (skipped), or TP_PY_NO_OWNER */
	__u8 pad[3];
};

/* A thread's entry in py_threads (bpf/python_stack.bpf.h; key pid_tgid):
 * userspace reads its thread state for a stall report's Python stack. */
struct tp_py_thread {
	__u64 tstate;      /* 0: none found (yet) */
	__u64 checked_ns;  /* when none was found */
	__u64 frame;       /* the last walk's innermost frame, */
	__u64 instr;       /* ... its instruction */
	__u64 sp;          /* ... and the entry's stack pointer */
	__u32 sent_empty;  /* the last stack sent was empty */
	__u32 pad;
};

/* One frame: its code object and the code unit it is at (what CPython's
 * _PyInterpreterFrame_LASTI gives; the line is decoded in userspace). */
struct tp_py_frame {
	__u64 code;
	__s32 lasti;
	__u32 pad;
};

enum tp_py_stack_flags {
	PY_STACK_TRUNCATED = 1,  /* more frames were outward than TP_PY_MAX_FRAMES */
	PY_STACK_NO_THREAD = 2,  /* the thread has no Python thread state (a C++ thread) */
};

/* EV_PY_STACK: sent when a thread's op or range entry sees a Python stack
 * other than the one it sent last (depth 0: no Python frame now); the
 * entries that follow on the thread share it. Only `depth` frames are sent. */
struct tp_py_stack_event {
	struct tp_event_header hdr;
	__u16 depth;
	__u16 flags;   /* enum tp_py_stack_flags */
	__u32 pad;
	struct tp_py_frame frames[TP_PY_MAX_FRAMES];
};

#ifdef __cplusplus
static_assert(sizeof(struct tp_py_layout) == 32, "Python layout ABI");
static_assert(sizeof(struct tp_py_stack_event) == 32 + 16 * TP_PY_MAX_FRAMES, "Python stack ABI");
static_assert(sizeof(struct tp_annot_event) == 40, "annotation event ABI");
static_assert(sizeof(struct tp_annot_begin) == 40 + TP_ANNOT_NAME_MAX, "annotation begin ABI");
#else
_Static_assert(sizeof(struct tp_annot_event) == 40, "annotation event ABI");
_Static_assert(sizeof(struct tp_annot_begin) == 40 + TP_ANNOT_NAME_MAX, "annotation begin ABI");
#endif

/* --sched (bpf/sched.bpf.c): why a traced thread was off its CPU. */
enum tp_offcpu_kind {
	OFFCPU_PREEMPTED = 0,  /* switched out still runnable (preempted, or it yielded) */
	OFFCPU_BLOCKED = 1,    /* asleep (S or D) until woken, then runnable */
	OFFCPU_GIL = 2,        /* asleep on a futex inside its interpreter's GIL: waiting
				* to take the GIL (or, dropping it, for another to take it) */
};

/* EV_OFFCPU, sent as the thread runs again (hdr.ts_ns: back on a CPU):
 * [off_ns, wake_ns) asleep (BLOCKED, GIL), [wake_ns, ts_ns) runnable,
 * waiting for a CPU (wake_ns == off_ns when PREEMPTED; 0 when the wakeup
 * was not seen: runnable from off_ns is unknown). */
struct tp_offcpu_event {
	struct tp_event_header hdr;
	__u64 off_ns;     /* switched out */
	__u64 wake_ns;    /* woken (put back on a run queue) */
	__u64 futex;      /* GIL or BLOCKED in futex: the futex word's address */
	__s32 syscall;    /* BLOCKED, GIL: the system call it slept in (x86-64 number),
			   * -1 outside one (a page fault, the kernel's own wait) */
	__u16 kind;       /* enum tp_offcpu_kind */
	__u16 state;      /* BLOCKED: the task state it slept in (1 S, 2 D, ...) */
};

/* A traced thread off its CPU now: the sched_off map (bpf/sched.bpf.c, tid
 * ->), which userspace reads for a stall report; fields as tp_offcpu_event. */
struct tp_sched_off {
	__u64 off_ns;
	__u64 wake_ns;
	__u64 futex;
	__s32 syscall;
	__u16 kind;
	__u16 state;
};

/* The address range of a traced process' GIL (the sched_gil map, pid ->). */
struct tp_gil_range {
	__u64 begin;
	__u64 end;
};

/* The raw arguments of a CUDA/NCCL entry point (x86-64 SysV): the six
 * integer argument registers and the first words above the return address,
 * where the 7th argument on and by-value structs beyond the registers go.
 * Which is what depends on the call: userspace decodes (model/cuda_call_info). */
#define TP_CUDA_STACK_ARGS 3

/* How a c10d collective's entry receives its process group and tensors
 * (bpf/collectives.bpf.c; discover/collective_probes): tp_op_layout.collective. */
enum tp_collective_layout {
	TP_COLLECTIVE_NONE = 0,       /* not a collective: raw arguments only */
	TP_COLLECTIVE_BY_HOLDER = 1,  /* c10d::ops::<op>(sret, const intrusive_ptr<ProcessGroup>&,
				       * ArrayRef<Tensor> data, length, ...) (PyTorch 1.x) */
	TP_COLLECTIVE_BY_THIS = 2,    /* ProcessGroupGloo::<op>(sret, this, std::vector<Tensor>&, ...)
				       * (PyTorch 2.x) */
};
#define TP_COLLECTIVE_MAX_TENSORS 8  /* tensors whose sizes a collective's entry sums */

/* A CUDA runtime, driver or NCCL call's entry (bpf/cuda.bpf.c). */
struct tp_cuda_call_event {
	struct tp_op_event op;            /* hdr.type = EV_CUDA_CALL; otherwise an op entry (pad 0) */
	__u64 regs[6];                    /* rdi, rsi, rdx, rcx, r8, r9 */
	__u64 stack[TP_CUDA_STACK_ARGS];  /* 8(%rsp), 16(%rsp)...; 0 when unreadable */
};

/* A c10d collective's entry (bpf/collectives.bpf.c): what userspace cannot
 * read later, the caller's frame being gone by then. */
struct tp_collective_event {
	struct tp_op_event op;  /* hdr.type = EV_COLLECTIVE; otherwise an op entry (pad 0) */
	__u64 group;       /* the process group's address; 0 when unreadable */
	__s32 rank;        /* its rank_ and size_, read together; 0 when unreadable */
	__s32 group_size;
	__u64 tensors;     /* the tensor list's length (meaningful for ops whose first
			    * argument is one); 0 when unreadable */
	__u64 numel;       /* the list's tensors' numel_, summed; 0 when not read */
	__u16 dtype;       /* the first tensor's c10::ScalarType (when numel was read) */
	__u8 one_dtype;    /* 1 when every tensor of the list has `dtype` */
	__u8 pad[5];
};

/* Autograd's Engine::evaluate_function(this, graph_task&, Node* func, ...)
 * entered (bpf/autograd.bpf.c): which node it runs. */
struct tp_autograd_node_event {
	struct tp_op_event op;  /* hdr.type = EV_AUTOGRAD_NODE; otherwise an op entry (pad 0) */
	__u64 node;        /* the Node* */
	__u64 vtable;      /* the word at node: its vtable pointer (which node class); 0 unreadable */
	__u64 py_type;     /* a Python Function's node (PyNode): the type (Py_TYPE) of its
			    * Python object, which names it; 0 otherwise or unreadable */
};

/* The agent's discovery events (bpf/agent.bpf.c, a ring of their own): the
 * process may be anyone's; userspace then reads its /proc/PID/maps. */
struct tp_agent_event {
	struct tp_event_header hdr;  /* EV_AGENT_EXEC; pid/tid: who */
	char comm[16];               /* its comm at the time */
};

#ifdef __cplusplus
static_assert(sizeof(struct tp_agent_event) == 40, "agent event ABI");
static_assert(sizeof(struct tp_collective_event) == 40 + 40, "collective event ABI");
static_assert(sizeof(struct tp_autograd_node_event) == 40 + 24, "autograd node event ABI");
static_assert(sizeof(struct tp_cuda_call_event) == 40 + 48 + 8 * TP_CUDA_STACK_ARGS, "cuda call ABI");
static_assert(sizeof(struct tp_event_header) == 24, "event header ABI");
static_assert(sizeof(struct tp_offcpu_event) == 24 + 32, "off-CPU event ABI");
static_assert(sizeof(struct tp_op_event) == 40, "op event ABI");
static_assert(__builtin_offsetof(struct tp_boxed_event, frame) == __builtin_offsetof(struct tp_op_event, frame),
	      "a boxed entry begins as an op entry (reserve_entry)");
static_assert(sizeof(struct tp_proc_event) == 48, "proc event ABI");
static_assert(sizeof(struct tp_oom_event) == 40 + TP_OOM_FILE_LEN, "oom event ABI");
static_assert(sizeof(struct tp_boxed_event) == 48 + 2 * TP_OP_NAME_LEN, "boxed event ABI");
static_assert(sizeof(struct tp_ctl) == 8, "ctl ABI");
static_assert(sizeof(struct tp_mem_event) == 40, "memory event ABI");
static_assert(sizeof(struct tp_device_mem_event) == 64, "device memory event ABI");
static_assert(sizeof(struct tp_return_slots) == 24 + 16 * TP_MAX_RETURNS, "return slots ABI");
#else
_Static_assert(sizeof(struct tp_agent_event) == 40, "agent event ABI");
_Static_assert(sizeof(struct tp_collective_event) == 40 + 40, "collective event ABI");
_Static_assert(sizeof(struct tp_autograd_node_event) == 40 + 24, "autograd node event ABI");
_Static_assert(sizeof(struct tp_cuda_call_event) == 40 + 48 + 8 * TP_CUDA_STACK_ARGS, "cuda call ABI");
_Static_assert(sizeof(struct tp_event_header) == 24, "event header ABI");
_Static_assert(sizeof(struct tp_offcpu_event) == 24 + 32, "off-CPU event ABI");
_Static_assert(sizeof(struct tp_op_event) == 40, "op event ABI");
_Static_assert(__builtin_offsetof(struct tp_boxed_event, frame) == __builtin_offsetof(struct tp_op_event, frame),
	       "a boxed entry begins as an op entry (reserve_entry)");
_Static_assert(sizeof(struct tp_proc_event) == 48, "proc event ABI");
_Static_assert(sizeof(struct tp_oom_event) == 40 + TP_OOM_FILE_LEN, "oom event ABI");
_Static_assert(sizeof(struct tp_boxed_event) == 48 + 2 * TP_OP_NAME_LEN, "boxed event ABI");
_Static_assert(sizeof(struct tp_ctl) == 8, "ctl ABI");
_Static_assert(sizeof(struct tp_mem_event) == 40, "memory event ABI");
_Static_assert(sizeof(struct tp_device_mem_event) == 64, "device memory event ABI");
_Static_assert(sizeof(struct tp_return_slots) == 24 + 16 * TP_MAX_RETURNS, "return slots ABI");
#endif

/* --shapes (bpf/shapes.bpf.c): at an op's entry, the metadata of its first
 * TP_SHAPES_TENSORS Tensor arguments, each up to TP_SHAPES_DIMS dims read.
 * Where each Tensor is at entry is in the op's tp_op_layout.tensor_places, a
 * byte per Tensor argument in order (tensor_args.h, TensorPlaceCookie): bits
 * 0-5 where its pointer is: 0 not known, 1-6 the integer argument register
 * 0-5 (rdi..r9), 7-63 the stack at rsp + 8 * (code - 6); bits 6-7 what it
 * points at (enum tp_tensor_ref). The TensorImpl field offsets come per
 * process from the tensor_layouts map. */
#define TP_SHAPES_TENSORS 4
#define TP_SHAPES_DIMS 6

/* What a Tensor argument's pointer points at (place byte bits 6-7). */
enum tp_tensor_ref {
	TENSOR_REF_PLAIN = 0,  /* an at::Tensor (its TensorImpl* first) */
	TENSOR_REF_C10_OPTIONAL = 1,  /* 1.x c10::optional<at::Tensor>: bool engaged, then the Tensor at +8 */
	TENSOR_REF_STD_OPTIONAL = 2,  /* std::optional<at::Tensor>: the Tensor, then bool engaged at +8 */
};

/* How one Tensor argument was read (tp_tensor_meta.status). */
enum tp_tensor_status {
	TENSOR_NOT_READ = 0,   /* no place known for it, or past its op's Tensors */
	TENSOR_READ = 1,       /* every field read, dims <= TP_SHAPES_DIMS */
	TENSOR_UNREADABLE = 2, /* a read failed (an undefined Tensor: null impl) */
	TENSOR_TOO_MANY_DIMS = 3, /* dims > TP_SHAPES_DIMS: sizes/strides cut */
	TENSOR_ABSENT = 4,     /* an optional Tensor that is None */
};

struct tp_tensor_meta {
	__s64 sizes[TP_SHAPES_DIMS];
	__s64 strides[TP_SHAPES_DIMS];
	__s64 storage_offset;
	__u64 impl;       /* the TensorImpl's address: the tensor's identity */
	__u32 dims;
	__u16 dtype;      /* c10::ScalarType */
	__u8 status;      /* enum tp_tensor_status */
	__u8 pad;
	__u64 storage_data;  /* its storage's data pointer (the allocation it lives in); 0 not read */
	__u32 version;       /* its version counter (in-place ops bump it) */
	__u32 pad2;
};

/* Per process (tgid): the TensorImpl offsets (discover/tensor_layout.h),
 * and where a thread's autograd sequence number is in its static TLS
 * (discover/sequence_number.h): the DTV slot `seq_module` (0: not known) of
 * the thread's TLS pointer, `seq_offset` bytes into that block. */
struct tp_tensor_layout {
	__u32 sizes_and_strides;
	__u32 storage_offset;
	__u32 dtype;
	__u32 storage;  /* TensorImpl::storage_, the data pointer in a StorageImpl and the
			 * version in a VersionCounter are all this far in (the size of an
			 * intrusive_ptr_target); version_counter_ is 24 bytes after
			 * storage_. 0: storage and version not read (no --memory) */
	__u64 seq_module;
	__u64 seq_offset;
};

#define TP_SEQ_UNREAD (~0ull)  /* tp_op_shapes_event.sequence_nr not read */

struct tp_op_shapes_event {
	struct tp_op_event op;  /* hdr.type = EV_OP_SHAPES; otherwise an op entry */
	__u64 sequence_nr;      /* at::sequence_number::peek() of the thread at entry,
				 * TP_SEQ_UNREAD when not read */
	struct tp_tensor_meta tensors[TP_SHAPES_TENSORS];
};

/* What the entry programs that read an op's arguments need to find them, by
 * op id (the op_layouts array map, bpf/common.bpf.h), written by userspace
 * as it attaches the op, before its probe is live: the attach cookie is the
 * op id alone. Each field is one program's; the plain op entry reads none. */
struct tp_op_layout {
	__u32 handle_offset;        /* boxed_enter: the OperatorHandle is at arg0 + this */
	__u32 group_rank_offset;    /* collective_enter: rank_ (size_ after it) in the group */
	__u32 tensor_numel_offset;  /* collective_enter: numel_ in c10::TensorImpl (0: not summed) */
	__u32 node_object_offset;   /* autograd_enter: a PyNode's Python object in it (0: none) */
	__u8 collective;            /* collective_enter: enum tp_collective_layout */
	__u8 tensor_places[TP_SHAPES_TENSORS];  /* shapes_enter: each Tensor argument's place */
	__u8 pad[3];
};

#ifdef __cplusplus
static_assert(sizeof(struct tp_op_layout) == 24, "op layout ABI");
static_assert(sizeof(struct tp_tensor_meta) == 136, "tensor meta ABI");
static_assert(sizeof(struct tp_op_shapes_event) == 48 + 136 * TP_SHAPES_TENSORS, "shapes event ABI");
#else
_Static_assert(sizeof(struct tp_op_layout) == 24, "op layout ABI");
_Static_assert(sizeof(struct tp_tensor_meta) == 136, "tensor meta ABI");
_Static_assert(sizeof(struct tp_op_shapes_event) == 48 + 136 * TP_SHAPES_TENSORS, "shapes event ABI");
#endif

#endif /* TORCHPROBE_BPF_EVENTS_H */
