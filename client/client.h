/* Client-internal API shared by the files of client/ (libcuda.so.1). Nothing here is exported:
 * the library exports only the CUDA driver API (cu*). */
#ifndef RGPU_CLIENT_H
#define RGPU_CLIENT_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/log.h"
#include "common/status.h"
#include "proto/ops.h"

#define CLI_HIDDEN __attribute__((visibility("hidden")))
#define CLI_EXPORT __attribute__((visibility("default")))

/* The driver version we report: the server's, but never below what CUDA 13 runtimes accept. */
#define CLI_MIN_DRIVER_VERSION 13000

struct cli_device {
    int ordinal;
    char name[256];
    CUuuid uuid;
    size_t total_mem;
    int attrs[CU_DEVICE_ATTRIBUTE_MAX];
    char pci_bus_id[32];
    int pci_domain, pci_bus, pci_device;
};

/* Every handle given to the application points to a client object that starts with this. */
struct cli_handle {
    uint64_t id;   /* the id the server knows; (counter << 4) | type */
    uint32_t type; /* enum proto_handle_type */
    uint32_t magic;
};
#define CLI_HANDLE_MAGIC 0x72677075u

/* Mint a fresh handle id of the given type and fill h. */
void cli_handle_init(struct cli_handle *h, enum proto_handle_type type);
/* h if it is a live handle of that type, else NULL. */
void *cli_handle_check(const void *h, enum proto_handle_type type);
void cli_handle_kill(struct cli_handle *h);
/* Tell the server to destroy the object (op with args [id], in ctx, without waiting), then kill
 * the handle and free the client object it starts (allocated with malloc/calloc). */
struct cli_ctx;
CUresult cli_handle_destroy(struct cli_handle *h, unsigned op, const struct cli_ctx *ctx);

struct cli_ctx {
    struct cli_handle h;
    int device;
    bool is_primary;
    unsigned flags;
    void *cls;            /* context-local storage, owned by export_tables.c */
    uint64_t limits[16];  /* cuCtxGetLimit answers already asked (context.c) */
    unsigned limits_known; /* bit per CUlimit in limits[]; atomic */
};
/* Forget cached cuCtxGetLimit answers of ctx (a bit per CUlimit): the driver may change them. */
void cli_ctx_limits_forget(struct cli_ctx *ctx, unsigned mask);

/* One driver call on the wire (see proto/ops.h for the meaning of args/data per op). */
#define CLI_CALL_MAX_ARGS 16
struct cli_call {
    unsigned op;
    unsigned nargs;
    uint64_t args[CLI_CALL_MAX_ARGS];
    uint64_t ctx;          /* Call.ctx; cli_call_* fill it from the current context if 0 */
    const void *data;      /* input bytes: inline up to PROTO_INLINE_MAX, else frame bulk */
    size_t data_len;
    /* Reply (synchronous calls): out[] values and data, copied into the caller's buffers. */
    uint64_t *out;         /* may be NULL */
    unsigned out_cap;
    unsigned nout;
    void *rdata;           /* reply data/bulk goes straight here (may be NULL) */
    size_t rdata_cap;
    size_t rdata_len;
    /* Called with the session's lock held just before the call is queued or written, only if
     * it is (data lanes start their job here: it is then on the wire before any later call). */
    void (*on_send)(void *arg);
    void *on_send_arg;
};

/* Send and wait for the reply; returns the call's CUresult, or a pending asynchronous error,
 * or CUDA_ERROR_DEVICE_UNAVAILABLE when the server is gone. */
CUresult cli_call_sync(struct cli_call *call);
/* RGPU_STATS=1 (client/call_stats.c): calls on the wire per operation, printed at exit.
 * cli_stats_now_us is 0 when the statistics are off. */
double cli_stats_now_us(void);
void cli_stats_count(unsigned op, bool sync, double since_us);
/* A synchronous call in the current context with at most one output value (out may be NULL;
 * CUDA_ERROR_UNKNOWN when the reply lacks it). */
CUresult cli_call_simple(unsigned op, unsigned nargs, const uint64_t *args, const void *data,
                         size_t len, uint64_t *out);
/* The same for calls about a device that need no current context (cuMemCreate...). */
CUresult cli_call_device(unsigned op, unsigned nargs, const uint64_t *args, const void *data,
                         size_t len, uint64_t *out);
/* Send without waiting (PROTO_FLAG_NOREPLY); failures come back at the next synchronous call. */
CUresult cli_call_async(struct cli_call *call);
/* Send a call whose reply data (len bytes) is written to dst when it arrives, later, while the
 * session waits for some other reply. Used by DtoH copies into pinned memory. */
CUresult cli_call_deferred(struct cli_call *call, void *dst, size_t len);

/* Ensure the session exists (connect + handshake on first use). CUDA_SUCCESS or the error that
 * every call returns while there is no session. */
CUresult cli_ensure_init(void);
bool cli_initialized(void);
int cli_driver_version(void);
int cli_device_count(void);
const struct cli_device *cli_device(int ordinal); /* NULL if out of range */

/* Current context's id for Call.ctx, or 0. */
uint64_t cli_ctx_current_id(void);
/* CUDA_SUCCESS if initialized and a context is current; the error to return otherwise. */
CUresult cli_need_ctx(void);
/* Drop every client-side object tied to ctx (on destroy/reset). */
void cli_memory_forget_ctx(struct cli_ctx *ctx);

/* Streams: the wire id of an application stream handle; per_thread maps the NULL stream to
 * CU_STREAM_PER_THREAD (the _ptsz/_ptds entry points). Returns false for a bad handle. */
bool cli_stream_id(CUstream stream, bool per_thread, uint64_t *id_p);
/* A stream argument of a call in the current context: cli_need_ctx's answer, else
 * CUDA_ERROR_INVALID_HANDLE for a bad handle, else CUDA_SUCCESS with its wire id. */
CUresult cli_stream_arg(CUstream stream, bool per_thread, uint64_t *id_p);

/* Stream capture bookkeeping (graph.c, stream.c): 0 = not capturing. */
bool cli_stream_set_capture(CUstream stream, uint64_t capture_id);
uint64_t cli_stream_capture_id(CUstream stream);

/* Events (event.c) for IPC (ipc.c): the wire ids of a live event and of its context; a new
 * event with those flags bound on the server by call, a synchronous call that names the new id
 * in args[0] (the event in *ph, or the call's error and no event). */
bool cli_event_ids(CUevent event, uint64_t *id_p, uint64_t *ctx_p);
CUresult cli_event_bind(struct cli_call *call, unsigned flags, CUevent *ph);
/* Pinned host memory known to the client (cuMemHostAlloc / cuMemHostRegister). */
bool cli_host_pinned(const void *p, size_t len);
/* The wire id of a CUDA array handle (array.c); false if it is not a live array. */
bool cli_array_id(CUarray array, uint64_t *id_p);
/* Device allocation containing dptr; false if none. */
bool cli_dev_lookup(CUdeviceptr dptr, CUdeviceptr *base_p, size_t *size_p);

/* Contexts. The thread's current context (NULL when none). */
struct cli_ctx *cli_ctx_current(void);
/* Occupancy answers cached by client/occupancy.c are stale: a function attribute or a cache
 * configuration changed. */
void cli_occupancy_forget(void);
void cli_ctx_set_current(struct cli_ctx *ctx);
/* The one primary-context object of a device: stable for the life of the process. */
struct cli_ctx *cli_primary_ctx(int dev);

/* Context-local storage hooks (export_tables.c): run the destructors of ctx's entries. */
void cli_cls_destroy(struct cli_ctx *ctx);
/* The export table with that UUID (export_tables.c), or NULL if we serve none. */
const void *cli_export_table(const CUuuid *id);

/* Walk the functions of a module (the tools module export table's slot 7, module.c): for each,
 * visit(user, function, its name, 0) until a call returns non-zero; then 1, else a CUresult. */
typedef uintptr_t (*cli_function_visitor)(void *user, CUfunction f, const char *name,
                                          uintptr_t zero);
CUresult cli_module_walk(CUcontext ctx, CUmodule mod, cli_function_visitor visit, void *user);

/* Log an unsupported entry point once by name; returns CUDA_ERROR_NOT_SUPPORTED. */
CUresult cli_unsupported(const char *name);
/* The same for a probe, whose refusal the caller handles: said at info level. */
CUresult cli_unsupported_probe(const char *name);

/* Wait until the server has executed every call sent so far (deferred replies read); a
 * pending asynchronous error stays for the next synchronous call. */
CUresult cli_session_fence(void);
/* The session's connection when it runs on RDMA (for registering memory with it), else NULL.
 * It stays valid for the life of the process. */
struct transport_conn;
struct transport_conn *cli_session_rdma_conn(void);
/* One-sided bulk copies of pinned memory on RDMA sessions (rdma_copy.c). CLI_RDMA_NOT_TAKEN
 * when the copy must go the ordinary way (not RDMA, not pinned, too small, not registrable). */
#define CLI_RDMA_NOT_TAKEN ((CUresult)-1)
/* Data lanes of TCP sessions (lanes.c): the server's offer from the Welcome and how many lanes
 * to use (0: none); a large HtoD (htod) or DtoH copy over them, or CLI_LANES_NOT_TAKEN when it
 * should go the ordinary way. */
#define CLI_LANES_NOT_TAKEN ((CUresult)-2)
void cli_lanes_offered(const char *addr, const void *secret, size_t secret_len, int want);
CUresult cli_lanes_copy(bool htod, CUdeviceptr dptr, void *host, size_t n, uint64_t stream,
                        bool async);
/* An asynchronous lane copy of pinned memory returns once its call is sent; the reply of any
 * synchronous call sent after it means the worker is done with it, and then the client's lanes
 * finish their part before that call returns: cli_lanes_sent (session lock held) counts the
 * lane copies sent so far; cli_lanes_settle(seq, lost) waits for those of them still moving
 * bytes (CUDA_ERROR_DEVICE_UNAVAILABLE if a lane failed; lost: the session is gone, so the
 * lanes are shut first). cli_lanes_quiesce: before pinned memory
 * is freed or unregistered, no lane copy may still read or write it. */
uint64_t cli_lanes_sent(void);
CUresult cli_lanes_settle(uint64_t seq, bool lost);
void cli_lanes_quiesce(void);
CUresult cli_rdma_htod(CUdeviceptr dst, const void *src, size_t n, uint64_t stream, bool async);
CUresult cli_rdma_dtoh(void *dst, CUdeviceptr src, size_t n, uint64_t stream, bool async);
/* Pinned memory leaves the client's records: wait until the server no longer needs its
 * registration, then drop it (mr from struct mem_range; NULL: nothing to do). */
void cli_rdma_forget(void *mr);

/* Translate an internal status at the client's edge. */
CUresult cli_status_to_cu(rg_status_t status);

#endif
