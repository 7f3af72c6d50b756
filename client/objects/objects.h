/* The objects layer, under the entry points and over the session: handles, contexts and the
 * thread's current context, the call in its context (a call carries its context to the session,
 * which never asks for it), and the lookups of device allocations and pinned memory
 * (address_ranges.c). The objects that only entry points use (streams, events, arrays...) are
 * theirs (api.h). */
#ifndef RGPU_CLIENT_OBJECTS_H
#define RGPU_CLIENT_OBJECTS_H

#include <cuda.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/session/call.h"
#include "proto/ops.h"

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
    void *cls;             /* context-local storage, owned by export_tables.c */
    uint64_t limits[16];   /* cuCtxGetLimit answers already asked (context.c) */
    unsigned limits_known; /* bit per CUlimit in limits[]; atomic */
};

/* Contexts (context_stack.c). The thread's current context (NULL when none), its id for
 * Call.ctx (0 when none), and CUDA_SUCCESS if initialized and a context is current (else the
 * error to return). */
struct cli_ctx *cli_ctx_current(void);
uint64_t cli_ctx_current_id(void);
CUresult cli_need_ctx(void);
/* The thread's context stack: replace its top, push (false when full), pop (false when empty;
 * the popped context in *ctx_p unless NULL), and drop a destroyed context wherever it is. */
void cli_ctx_set_current(struct cli_ctx *ctx);
bool cli_ctx_push(struct cli_ctx *ctx);
bool cli_ctx_pop(struct cli_ctx **ctx_p);
void cli_ctx_forget(const struct cli_ctx *ctx);
/* Context teardown (cuCtxDestroy, cuDevicePrimaryCtxReset): what keeps state per context
 * registers a hook (from a constructor; at most CLI_CTX_HOOKS), called by cli_ctx_teardown with
 * the context before the server is told, in the order registered. */
#define CLI_CTX_HOOKS 8
void cli_ctx_on_teardown(void (*hook)(struct cli_ctx *ctx));
void cli_ctx_teardown(struct cli_ctx *ctx);

/* The call in its context (call.c). The call goes to context ctx (its id in Call.ctx, to its
 * server); NULL: none. */
void cli_call_in(struct cli_call *call, const struct cli_ctx *ctx);
/* Send and wait for the reply; returns the call's CUresult, or a pending asynchronous error,
 * or CUDA_ERROR_DEVICE_UNAVAILABLE when the server is gone. A call whose context is 0 goes in
 * the calling thread's current context. */
CUresult cli_call_sync(struct cli_call *call);
/* A synchronous call in the current context with at most one output value (out may be NULL;
 * CUDA_ERROR_UNKNOWN when the reply lacks it). */
CUresult cli_call_simple(struct cli_call *call, uint64_t *out);
/* The same for calls about a device that need no current context (cuMemCreate...). */
CUresult cli_call_device(struct cli_call *call, uint64_t *out);
/* Send without waiting (PROTO_FLAG_NOREPLY); failures come back at the next synchronous call. */
CUresult cli_call_async(struct cli_call *call);
/* Send a call whose reply data (len bytes) is written to dst when it arrives, later, while the
 * session waits for some other reply. Used by DtoH copies into pinned memory. */
CUresult cli_call_deferred(struct cli_call *call, void *dst, size_t len);

/* Pinned host memory known to the client (cuMemHostAlloc / cuMemHostRegister). */
bool cli_host_pinned(const void *p, size_t len);
/* Device allocation containing dptr; false if none. */
bool cli_dev_lookup(CUdeviceptr dptr, CUdeviceptr *base_p, size_t *size_p);

#endif
