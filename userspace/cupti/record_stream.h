/*
 * The record stream from the injected CUPTI collector (collector.cc, inside
 * the target) to torchprobe (record_receiver.cc): what ran on the GPU and
 * the CUDA API calls that made it. Our own small format, shared by both
 * sides through this one header (C and C++).
 *
 * Transport: a unix datagram socket bound by torchprobe at the path in the
 * target's $TORCHPROBE_CUPTI_SOCKET. Each datagram holds whole records, back
 * to back. The collector sends without blocking: a datagram the socket will
 * not take is dropped and counted (TPC_DROPS, sent at the end).
 *
 * Every record starts with struct tpc_header {type, size, pid}; size counts
 * the header and everything after it (a kernel's name), so a reader skips
 * types it does not know. Integers are the host's (x86-64: little-endian).
 * Timestamps are CLOCK_MONOTONIC ns, the clock BPF stamps events with:
 * the collector registers it as CUPTI's timestamp callback; where that
 * cannot be done, TPC_HELLO says so and carries the offset to add instead.
 */
#ifndef TORCHPROBE_CUPTI_RECORD_STREAM_H
#define TORCHPROBE_CUPTI_RECORD_STREAM_H

#include <stdint.h>

#define TPC_VERSION 1
#define TPC_SOCKET_ENV "TORCHPROBE_CUPTI_SOCKET"
#define TPC_MAX_DATAGRAM 32768 /* bytes: a sender's datagrams are at most this */
#define TPC_NAME_MAX 1024      /* bytes of a kernel name kept (cut, not dropped) */

/* What torchprobe calls in a running process it loaded the collector into
 * (record --inject-cupti): int TPC_ATTACH_FUNCTION(const char* socket_path),
 * which returns one of these. */
#define TPC_ATTACH_FUNCTION "torchprobe_cupti_attach"
enum tpc_attach_status {
	TPC_ATTACH_OK = 0,
	TPC_ATTACH_NO_SOCKET = 1,          /* torchprobe's socket could not be reached */
	TPC_ATTACH_NO_CUPTI = 2,           /* no CUPTI library in the process or for the loader */
	TPC_ATTACH_BUSY = 3,               /* another CUPTI subscriber (a profiler) owns the process */
	TPC_ATTACH_SUBSCRIBE_FAILED = 4,   /* cuptiSubscribe failed otherwise */
	TPC_ATTACH_CALLBACKS_FAILED = 5,   /* cuptiActivityRegisterCallbacks failed */
};

enum tpc_type {
	TPC_HELLO = 1,  /* the collector started in a process: struct tpc_hello */
	TPC_KERNEL = 2, /* a kernel ran: struct tpc_kernel + name */
	TPC_MEMCPY = 3, /* a copy ran: struct tpc_memcpy */
	TPC_MEMSET = 4, /* a fill ran: struct tpc_memset */
	TPC_API = 5,    /* a runtime or driver API call: struct tpc_api */
	TPC_SYNC = 6,   /* a synchronization: struct tpc_sync */
	TPC_DROPS = 7,  /* counts of what was lost, sent last: struct tpc_drops */
	TPC_NOTE = 8,   /* one line for the user (why there is no GPU data): text after it */
};

struct tpc_header {
	uint16_t type; /* enum tpc_type */
	uint16_t size; /* bytes of the whole record, header included */
	uint32_t pid;  /* the process the record comes from */
};

enum tpc_clock {
	TPC_CLOCK_MONOTONIC = 1,   /* CUPTI calls our CLOCK_MONOTONIC timestamp callback */
	TPC_CLOCK_CUPTI_OFFSET = 2 /* CUPTI's own clock: add clock_offset_ns */
};

struct tpc_hello {
	struct tpc_header hdr;
	uint32_t version;        /* TPC_VERSION */
	uint32_t clock;          /* enum tpc_clock */
	int64_t clock_offset_ns; /* TPC_CLOCK_CUPTI_OFFSET: CLOCK_MONOTONIC - CUPTI's clock */
	uint32_t cupti_version;  /* cuptiGetVersion() */
	uint32_t pad;
};

/* The fields every GPU activity has. */
struct tpc_activity {
	uint64_t start_ns;    /* CLOCK_MONOTONIC ns */
	uint64_t end_ns;      /* CLOCK_MONOTONIC ns */
	uint32_t correlation; /* CUPTI's id of the API call that made it */
	uint32_t device;      /* device ordinal */
	uint32_t context;     /* CUDA context id */
	uint32_t stream;      /* CUDA stream id (CUPTI's numbering) */
	uint32_t graph_id;    /* the CUDA graph it ran in; 0: none */
	uint32_t pad;
};

struct tpc_kernel {
	struct tpc_header hdr;
	struct tpc_activity a;
	int32_t grid[3];
	int32_t block[3];
	uint32_t shared_bytes;      /* static + dynamic shared memory */
	uint16_t registers;         /* per thread */
	uint16_t name_len;          /* bytes of name after this struct, no NUL */
};

struct tpc_memcpy {
	struct tpc_header hdr;
	struct tpc_activity a;
	uint64_t bytes;
	uint8_t copy_kind; /* CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 8 DtoD, ... */
	uint8_t src_kind;  /* CUpti_ActivityMemoryKind */
	uint8_t dst_kind;
	uint8_t pad[5];
};

struct tpc_memset {
	struct tpc_header hdr;
	struct tpc_activity a;
	uint64_t bytes;
	uint32_t value;
	uint32_t pad;
};

enum tpc_api_domain { TPC_API_RUNTIME = 1, TPC_API_DRIVER = 2 };

struct tpc_api {
	struct tpc_header hdr;
	uint64_t start_ns;
	uint64_t end_ns;
	uint32_t correlation;
	uint32_t cbid;   /* CUPTI's callback id of the function (cupti_runtime_cbid.h, cupti_driver_cbid.h) */
	uint32_t domain; /* enum tpc_api_domain */
	uint32_t tid;    /* the kernel's thread id of the caller (gettid), 0 if unknown */
};

struct tpc_sync {
	struct tpc_header hdr;
	uint64_t start_ns;
	uint64_t end_ns;
	uint32_t correlation;
	uint32_t type;    /* CUpti_ActivitySynchronizationType: 1 event, 2 stream-wait-event, 3 stream, 4 context */
	uint32_t context;
	uint32_t stream;  /* 0xffffffff: none */
};

struct tpc_drops {
	struct tpc_header hdr;
	uint64_t records_sent;    /* records the socket took */
	uint64_t records_dropped; /* records the socket would not take (full, or torchprobe gone) */
	uint64_t cupti_dropped;   /* records CUPTI itself dropped (cuptiActivityGetNumDroppedRecords) */
	uint64_t unknown;         /* activity records of kinds we do not forward */
};

#ifdef __cplusplus
static_assert(sizeof(struct tpc_header) == 8, "tpc header ABI");
static_assert(sizeof(struct tpc_hello) == 32, "tpc hello ABI");
static_assert(sizeof(struct tpc_kernel) == 8 + 40 + 32, "tpc kernel ABI");
static_assert(sizeof(struct tpc_memcpy) == 8 + 40 + 16, "tpc memcpy ABI");
static_assert(sizeof(struct tpc_memset) == 8 + 40 + 16, "tpc memset ABI");
static_assert(sizeof(struct tpc_api) == 8 + 32, "tpc api ABI");
static_assert(sizeof(struct tpc_sync) == 8 + 32, "tpc sync ABI");
static_assert(sizeof(struct tpc_drops) == 8 + 32, "tpc drops ABI");
#endif

#endif /* TORCHPROBE_CUPTI_RECORD_STREAM_H */
