/* Client objects and their lookups (client.h includes it): devices, handles, contexts,
 * streams, events, arrays, allocations and pinned memory, modules and export tables. */
#ifndef RGPU_CLIENT_OBJECTS_H
#define RGPU_CLIENT_OBJECTS_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

#include "client/call.h"
#include "proto/ops.h"

struct cli_device {
    int ordinal;
    char name[256];
    CUuuid uuid;
    size_t total_mem;
    int attrs[CU_DEVICE_ATTRIBUTE_MAX];
    char pci_bus_id[32];
    int pci_domain, pci_bus, pci_device;
    struct cli_session *sess; /* the session of its server */
    int remote;               /* its ordinal on that server (what the wire carries) */
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
    struct cli_session *sess; /* its device's session: where its calls go */
    bool is_primary;
    unsigned flags;
    void *cls;            /* context-local storage, owned by export_tables.c */
    uint64_t limits[16];  /* cuCtxGetLimit answers already asked (context.c) */
    unsigned limits_known; /* bit per CUlimit in limits[]; atomic */
};
/* Forget cached cuCtxGetLimit answers of ctx (a bit per CUlimit): the driver may change them. */
void cli_ctx_limits_forget(struct cli_ctx *ctx, unsigned mask);

/* Current context's id for Call.ctx, or 0. */
uint64_t cli_ctx_current_id(void);
/* CUDA_SUCCESS if initialized and a context is current; the error to return otherwise. */
CUresult cli_need_ctx(void);
/* Context teardown (cuCtxDestroy, cuDevicePrimaryCtxReset): what keeps state per context
 * registers a hook (from a constructor; at most CLI_CTX_HOOKS), called with the context before
 * the server is told, in the order registered. */
#define CLI_CTX_HOOKS 8
void cli_ctx_on_teardown(void (*hook)(struct cli_ctx *ctx));

/* Streams: the wire id of an application stream handle; per_thread maps the NULL stream to
 * CU_STREAM_PER_THREAD (the _ptsz/_ptds entry points). Returns false for a bad handle. */
bool cli_stream_id(CUstream stream, bool per_thread, uint64_t *id_p);
/* A stream argument of a call in the current context: cli_need_ctx's answer, else
 * CUDA_ERROR_INVALID_HANDLE for a bad handle, else CUDA_SUCCESS with its wire id. */
CUresult cli_stream_arg(CUstream stream, bool per_thread, uint64_t *id_p);
/* Send call to the context of stream (created in another device's context, it may be on
 * another server); the current context for the NULL and per-thread streams. */
void cli_stream_route(struct cli_call *call, CUstream stream);

/* Stream capture bookkeeping (graph.c, stream.c): 0 = not capturing. */
bool cli_stream_set_capture(CUstream stream, uint64_t capture_id);
uint64_t cli_stream_capture_id(CUstream stream);

/* Events (event.c) for IPC (ipc.c): the wire ids of a live event and of its context; a new
 * event with those flags bound on the server by call, a synchronous call that names the new id
 * in args[0] (the event in *ph, or the call's error and no event). */
bool cli_event_ids(CUevent event, uint64_t *id_p, uint64_t *ctx_p);
struct cli_ctx *cli_event_ctx(CUevent event); /* its context; NULL: not an event */
CUresult cli_event_bind(struct cli_call *call, unsigned flags, CUevent *ph);
/* Pinned host memory known to the client (cuMemHostAlloc / cuMemHostRegister). */
bool cli_host_pinned(const void *p, size_t len);
/* The wire id of a CUDA array handle (array.c); false if it is not a live array. */
bool cli_array_id(CUarray array, uint64_t *id_p);
/* Whether [va, va + size) shares a byte with an address reservation (vmm.c). */
bool cli_vmm_reserved_overlaps(CUdeviceptr va, size_t size);
/* The context a CUDA array was created in (array.c); NULL if it is not a live array. */
struct cli_ctx *cli_array_ctx(CUarray array);
/* Device allocation containing dptr; false if none. */
bool cli_dev_lookup(CUdeviceptr dptr, CUdeviceptr *base_p, size_t *size_p);

/* Contexts (context_stack.c). The thread's current context (NULL when none). */
struct cli_ctx *cli_ctx_current(void);
/* The thread's context stack: push (false when full), pop (false when empty; the popped context
 * in *ctx_p unless NULL), and drop a destroyed context from it wherever it is. */
bool cli_ctx_push(struct cli_ctx *ctx);
bool cli_ctx_pop(struct cli_ctx **ctx_p);
void cli_ctx_forget(const struct cli_ctx *ctx);
/* Run the teardown hooks (cli_ctx_on_teardown) for a context that goes. */
void cli_ctx_teardown(struct cli_ctx *ctx);
/* Occupancy answers cached by client/occupancy.c are stale: a function attribute or a cache
 * configuration changed. */
void cli_occupancy_forget(void);
void cli_ctx_set_current(struct cli_ctx *ctx);
/* The one primary-context object of a device: stable for the life of the process. */
struct cli_ctx *cli_primary_ctx(int dev);

/* The export table with that UUID (export_tables.c), or NULL if we serve none. */
const void *cli_export_table(const CUuuid *id);

/* Walk the functions of a module (the tools module export table's slot 7, module.c): for each,
 * visit(user, function, its name, 0) until a call returns non-zero; then 1, else a CUresult. */
typedef uintptr_t (*cli_function_visitor)(void *user, CUfunction f, const char *name,
                                          uintptr_t zero);
CUresult cli_module_walk(CUcontext ctx, CUmodule mod, cli_function_visitor visit, void *user);

#endif
