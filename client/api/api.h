/* The entry points' layer (the top of the client): what its files share. The library exports
 * only the CUDA driver API (cu*, CLI_EXPORT); the rest is hidden (-fvisibility=hidden). The
 * objects here belong to the entry points that make them (streams, events, arrays, reservations,
 * primary contexts, export tables...): nothing below this layer looks them up. */
#ifndef RGPU_CLIENT_API_H
#define RGPU_CLIENT_API_H

#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/objects/objects.h"
#include "common/log.h"
#include "common/status.h"
#include "proto/ops.h"

#define CLI_EXPORT __attribute__((visibility("default")))
/* An entry point and its per-thread-stream twin (NAME_ptsz), both calling
 * impl(args..., per_thread). */
#define CLI_PTSZ_PAIR(name, impl, params, ...)                                                     \
    CLI_EXPORT CUresult name params                                                                \
    {                                                                                              \
        return impl(__VA_ARGS__, false);                                                           \
    }                                                                                              \
    CLI_EXPORT CUresult name##_ptsz params                                                         \
    {                                                                                              \
        return impl(__VA_ARGS__, true);                                                            \
    }

/* Log an unsupported entry point once by name; returns CUDA_ERROR_NOT_SUPPORTED
 * (unsupported.c). */
CUresult cli_unsupported(const char *name);
/* The same for a probe, whose refusal the caller handles: said at info level. */
CUresult cli_unsupported_probe(const char *name);

/* Contexts (context.c). The one primary-context object of a device: stable for the life of the
 * process. Forget cached cuCtxGetLimit answers of ctx (a bit per CUlimit): the driver may change
 * them. */
struct cli_ctx *cli_primary_ctx(int dev);
void cli_ctx_limits_forget(struct cli_ctx *ctx, unsigned mask);

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

/* Events (event.c) for IPC (ipc.c): the wire id of a live event, with call bound to its
 * context (and so to that context's server); a new event with those flags bound on the server
 * by call, a synchronous call that names the new id in args[0] (the event in *ph, or the call's
 * error and no event). */
bool cli_event_ids(CUevent event, uint64_t *id_p, struct cli_call *call);
struct cli_ctx *cli_event_ctx(CUevent event); /* its context; NULL: not an event */
CUresult cli_event_bind(struct cli_call *call, unsigned flags, CUevent *ph);
/* The wire id of a CUDA array handle (array.c); false if it is not a live array. */
bool cli_array_id(CUarray array, uint64_t *id_p);
/* The context a CUDA array was created in (array.c); NULL if it is not a live array. */
struct cli_ctx *cli_array_ctx(CUarray array);
/* Whether [va, va + size) shares a byte with an address reservation (vmm.c). */
bool cli_vmm_reserved_overlaps(CUdeviceptr va, size_t size);

/* Occupancy answers cached by occupancy.c are stale: a function attribute or a cache
 * configuration changed. */
void cli_occupancy_forget(void);

/* The export table with that UUID (export_tables.c), or NULL if we serve none. */
const void *cli_export_table(const CUuuid *id);

/* Walk the functions of a module (the tools module export table's slot 7, module.c): for each,
 * visit(user, function, its name, 0) until a call returns non-zero; then 1, else a CUresult. */
typedef uintptr_t (*cli_function_visitor)(void *user, CUfunction f, const char *name,
                                          uintptr_t zero);
CUresult cli_module_walk(CUcontext ctx, CUmodule mod, cli_function_visitor visit, void *user);

/* Several servers (peer.c): a copy whose device memory is on another server than the current
 * context's (dst_dev / src_dev: that side is device memory), done in stream order; or
 * CLI_PEER_NOT_TAKEN when it is all on the current context's server. Asked only when there are
 * several sessions. cli_peer_bulk_ok: the current context's server is the one the data lanes
 * and RDMA copies serve (the first). cli_peer_wait_event: cuStreamWaitEvent across servers
 * (NOT_TAKEN on one server). */
#define CLI_PEER_NOT_TAKEN ((CUresult)-3)
CUresult cli_peer_copy(CUdeviceptr dst, bool dst_dev, CUdeviceptr src, bool src_dev, size_t n,
                       CUstream stream, bool per_thread);
bool cli_peer_bulk_ok(void);
CUresult cli_peer_wait_event(struct cli_ctx *stream_ctx, struct cli_ctx *event_ctx, CUevent event);

#endif
