/* Contexts, modules and libraries, functions and kernels, launches, streams, events and
 * occupancy; and the dispatch table of every op. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/module_cache.h"
#include "server/lanes.h"
#include "server/session.h"
#include "server/tenancy.h"

#define NAME_MAX_LEN 4096

/* The handler tables of the other handlers_*.c files (each op is in exactly one table). */

static void *handle_real(struct srv_session *s, uint64_t id, unsigned type)
{
    struct srv_handle *h = srv_handle_get(s, id, type);

    return h != NULL ? h->real : NULL;
}

/* A function or a kernel (the driver takes a CUkernel wherever a CUfunction is taken). */
static struct srv_handle *func_handle(struct srv_session *s, uint64_t id)
{
    unsigned type = PROTO_ID_TYPE(id);

    if (type != PROTO_H_FUNCTION && type != PROTO_H_KERNEL)
        return NULL;
    return srv_handle_get(s, id, type);
}

static CUresult bind_new(struct srv_session *s, uint64_t id, unsigned type, void *real)
{
    if (PROTO_ID_TYPE(id) != type || srv_handle_put(s, id, real) != RG_OK)
        return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

/* ---- contexts --------------------------------------------------------------------------- */

CUresult srv_op_nop(struct srv_session *s, struct srv_call *call)
{
    return CUDA_SUCCESS;
}

CUresult srv_op_ctx_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_CTX_CREATE *a = SRV_ARGS(call, CTX_CREATE);
    CUcontext ctx;
    CUresult res;

    if (a->dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    res = s->drv.cuCtxCreate(&ctx, NULL, (unsigned)a->flags, s->devices[a->dev]);
    if ((res = srv_handle_adopt(s, a->id, PROTO_H_CTX, res, ctx)) != CUDA_SUCCESS)
        return res;
    srv_handle_get(s, a->id, PROTO_H_CTX)->size = a->dev; /* its device, for the gate */
    s->current_ctx = a->id;
    return CUDA_SUCCESS;
}

CUresult srv_op_ctx_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_CTX_DESTROY *a = SRV_ARGS(call, CTX_DESTROY);
    CUcontext ctx = handle_real(s, a->ctx, PROTO_H_CTX);

    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    srv_gate_forget_context(s);
    srv_handle_del(s, a->ctx);
    srv_staging_release(s, a->ctx);
    s->current_ctx = 0;
    return s->drv.cuCtxDestroy(ctx);
}

CUresult srv_op_ctx_sync(struct srv_session *s, struct srv_call *call)
{
    return s->drv.cuCtxSynchronize();
}

CUresult srv_op_ctx_set_limit(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_CTX_SET_LIMIT *a = SRV_ARGS(call, CTX_SET_LIMIT);
    return s->drv.cuCtxSetLimit((CUlimit)a->limit, a->value);
}

CUresult srv_op_ctx_get_limit(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_CTX_GET_LIMIT *a = SRV_ARGS(call, CTX_GET_LIMIT);
    size_t v;
    CUresult res = s->drv.cuCtxGetLimit(&v, (CUlimit)a->limit);

    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = v;
    return res;
}

CUresult srv_op_ctx_cache(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_CTX_SET_CACHE_CONFIG *a = SRV_ARGS(call, CTX_SET_CACHE_CONFIG);
    return s->drv.cuCtxSetCacheConfig((CUfunc_cache)a->config);
}

CUresult srv_op_primary_reset(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_PRIMARY_CTX_RESET *a = SRV_ARGS(call, PRIMARY_CTX_RESET);
    if (a->dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    srv_gate_forget_context(s);
    s->nallocs = 0; /* the reset frees them all */
    s->mem_used = 0;
    srv_staging_release(s, PROTO_PRIMARY_CTX_ID(a->dev));
    s->current_ctx = 0;
    return s->drv.cuDevicePrimaryCtxReset(s->devices[a->dev]);
}

CUresult srv_op_primary_flags(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_PRIMARY_CTX_SET_FLAGS *a = SRV_ARGS(call, PRIMARY_CTX_SET_FLAGS);
    if (a->dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    return s->drv.cuDevicePrimaryCtxSetFlags(s->devices[a->dev], (unsigned)a->flags);
}

/* ---- modules and libraries -------------------------------------------------------------- */



/* Images come inline, as bulk, or from the module cache by hash (server/module_cache.c). */
CUresult srv_op_module_load(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MODULE_LOAD *a = SRV_ARGS(call, MODULE_LOAD);
    void *image;
    size_t len, before;
    CUmodule mod;
    CUresult res = srv_image_take(s, call, &image, &len);

    if (res != CUDA_SUCCESS)
        return res;
    before = srv_mem_free_now(s);
    res = s->drv.cuModuleLoadData(&mod, image);
    srv_image_release(s, call, image, len, res == CUDA_SUCCESS);
    res = srv_handle_adopt(s, a->id, PROTO_H_MODULE, res, mod);
    return res == CUDA_SUCCESS ? srv_load_charge(s, a->id, PROTO_H_MODULE, before) : res;
}

CUresult srv_op_library_load(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_LIBRARY_LOAD *a = SRV_ARGS(call, LIBRARY_LOAD);
    size_t before = srv_mem_free_now(s);
    CUlibrary lib;
    CUresult res = srv_library_load(s, call, &lib); /* server/library_image.c */

    res = srv_handle_adopt(s, a->id, PROTO_H_LIBRARY, res, lib);
    return res == CUDA_SUCCESS ? srv_load_charge(s, a->id, PROTO_H_LIBRARY, before) : res;
}

CUresult srv_op_unload(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MODULE_UNLOAD *a = SRV_ARGS(call, MODULE_UNLOAD);
    unsigned type = call->msg->op == PROTO_OP_MODULE_UNLOAD ? PROTO_H_MODULE : PROTO_H_LIBRARY;

    return srv_handle_destroy(s, a->handle, type);
}

/* Call.data as a NUL-terminated name. */
static bool call_name(struct srv_call *call, char *buf)
{
    size_t len = call->msg->data.len;

    if (len == 0 || len >= NAME_MAX_LEN || memchr(call->msg->data.data, 0, len) != NULL)
        return false;
    memcpy(buf, call->msg->data.data, len);
    buf[len] = '\0';
    return true;
}

CUresult srv_op_get_by_name(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MODULE_GET_FUNCTION *a = SRV_ARGS(call, MODULE_GET_FUNCTION);
    char name[NAME_MAX_LEN];
    bool kernel = call->msg->op == PROTO_OP_LIBRARY_GET_KERNEL;
    void *owner = handle_real(s, a->parent, kernel ? PROTO_H_LIBRARY : PROTO_H_MODULE);
    void *real;
    CUresult res;

    if (owner == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!call_name(call, name))
        return CUDA_ERROR_INVALID_VALUE;
    res = kernel ? s->drv.cuLibraryGetKernel((CUkernel *)&real, owner, name)
                 : s->drv.cuModuleGetFunction((CUfunction *)&real, owner, name);
    if (res == CUDA_SUCCESS)
        res = bind_new(s, a->id, kernel ? PROTO_H_KERNEL : PROTO_H_FUNCTION, real);
    return res;
}

CUresult srv_op_get_global(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MODULE_GET_GLOBAL *a = SRV_ARGS(call, MODULE_GET_GLOBAL);
    char name[NAME_MAX_LEN];
    bool lib = call->msg->op == PROTO_OP_LIBRARY_GET_GLOBAL;
    void *owner = handle_real(s, a->parent, lib ? PROTO_H_LIBRARY : PROTO_H_MODULE);
    CUdeviceptr d;
    size_t size;
    CUresult res;

    if (owner == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!call_name(call, name))
        return CUDA_ERROR_INVALID_VALUE;
    res = lib ? s->drv.cuLibraryGetGlobal(&d, &size, owner, name)
              : s->drv.cuModuleGetGlobal(&d, &size, owner, name);
    if (res == CUDA_SUCCESS) {
        call->out[call->nout++] = d;
        call->out[call->nout++] = size;
    }
    return res;
}

CUresult srv_op_library_get_module(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_LIBRARY_GET_MODULE *a = SRV_ARGS(call, LIBRARY_GET_MODULE);
    void *lib = handle_real(s, a->library, PROTO_H_LIBRARY);
    CUmodule mod;
    CUresult res;

    if (lib == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuLibraryGetModule(&mod, lib);
    if (res == CUDA_SUCCESS)
        res = bind_new(s, a->id, PROTO_H_MODULE, mod);
    /* Owned by the library: bound for lookups, never unloaded on its own. */
    if (res == CUDA_SUCCESS)
        srv_handle_get(s, a->id, PROTO_H_MODULE)->borrowed = true;
    return res;
}

CUresult srv_op_kernel_get_function(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_KERNEL_GET_FUNCTION *a = SRV_ARGS(call, KERNEL_GET_FUNCTION);
    void *kernel = handle_real(s, a->kernel, PROTO_H_KERNEL);
    CUfunction f;
    CUresult res;

    if (kernel == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuKernelGetFunction(&f, kernel);
    return res == CUDA_SUCCESS ? bind_new(s, a->id, PROTO_H_FUNCTION, f) : res;
}

/* ---- functions and launches ------------------------------------------------------------- */

CUresult srv_op_func_get_attr(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_FUNC_GET_ATTRIBUTE *a = SRV_ARGS(call, FUNC_GET_ATTRIBUTE);
    struct srv_handle *h = func_handle(s, a->func);
    int v;
    CUresult res;

    if (h == NULL || a->dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_HANDLE;
    res = PROTO_ID_TYPE(a->func) == PROTO_H_KERNEL
              ? s->drv.cuKernelGetAttribute(&v, (CUfunction_attribute)a->attrib, h->real,
                                            s->devices[a->dev])
              : s->drv.cuFuncGetAttribute(&v, (CUfunction_attribute)a->attrib, h->real);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = (uint64_t)(int64_t)v;
    return res;
}

CUresult srv_op_func_set_attr(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_FUNC_SET_ATTRIBUTE *a = SRV_ARGS(call, FUNC_SET_ATTRIBUTE);
    struct srv_handle *h = func_handle(s, a->func);

    if (h == NULL || a->dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_HANDLE;
    if (PROTO_ID_TYPE(a->func) == PROTO_H_KERNEL)
        return s->drv.cuKernelSetAttribute((CUfunction_attribute)a->attrib, (int)a->value, h->real,
                                           s->devices[a->dev]);
    return s->drv.cuFuncSetAttribute(h->real, (CUfunction_attribute)a->attrib, (int)a->value);
}

CUresult srv_op_func_cache(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_FUNC_SET_CACHE_CONFIG *a = SRV_ARGS(call, FUNC_SET_CACHE_CONFIG);
    struct srv_handle *h = func_handle(s, a->func);

    if (h == NULL || a->dev >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_HANDLE;
    if (PROTO_ID_TYPE(a->func) == PROTO_H_KERNEL)
        return s->drv.cuKernelSetCacheConfig(h->real, (CUfunc_cache)a->config, s->devices[a->dev]);
    return s->drv.cuFuncSetCacheConfig(h->real, (CUfunc_cache)a->config);
}

#define MAX_PARAMS 4096

/* The parameter layout, asked of the driver once per handle. */
static CUresult layout_of(struct srv_session *s, struct srv_handle *h)
{
    bool kernel = PROTO_ID_TYPE(h->id) == PROTO_H_KERNEL;
    uint32_t *lay;
    size_t off, size;
    unsigned n = 0;
    CUresult res = CUDA_SUCCESS;

    if (h->nparams != 0xffffffffu)
        return CUDA_SUCCESS;
    if ((lay = malloc(2 * MAX_PARAMS * sizeof(*lay))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (; n < MAX_PARAMS; n++) {
        res = kernel ? s->drv.cuKernelGetParamInfo(h->real, n, &off, &size)
                     : s->drv.cuFuncGetParamInfo(h->real, n, &off, &size);
        if (res != CUDA_SUCCESS)
            break;
        lay[2 * n] = (uint32_t)off;
        lay[2 * n + 1] = (uint32_t)size;
    }
    if (res != CUDA_SUCCESS && res != CUDA_ERROR_INVALID_VALUE) {
        free(lay);
        return res;
    }
    h->layout = lay;
    h->nparams = n;
    return CUDA_SUCCESS;
}

CUresult srv_op_param_layout(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_FUNC_GET_PARAM_LAYOUT *a = SRV_ARGS(call, FUNC_GET_PARAM_LAYOUT);
    struct srv_handle *h = func_handle(s, a->func);
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = layout_of(s, h)) != CUDA_SUCCESS)
        return res;
    if ((call->out_ext = malloc((1 + 2 * (size_t)h->nparams) * sizeof(uint64_t))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    call->out_ext[0] = h->nparams;
    for (unsigned i = 0; i < 2 * h->nparams; i++)
        call->out_ext[1 + i] = h->layout[i];
    call->nout = 1 + 2 * (size_t)h->nparams;
    return CUDA_SUCCESS;
}

static CUresult launch_now(struct srv_session *s, struct srv_call *call, void *f, void **params,
                           const void *attrs, unsigned nattr, CUstream stream)
{
    const struct proto_args_LAUNCH *a = SRV_ARGS(call, LAUNCH);
    CUlaunchConfig cfg = {.gridDimX = (unsigned)a->gx,
                          .gridDimY = (unsigned)a->gy,
                          .gridDimZ = (unsigned)a->gz,
                          .blockDimX = (unsigned)a->bx,
                          .blockDimY = (unsigned)a->by,
                          .blockDimZ = (unsigned)a->bz,
                          .sharedMemBytes = (unsigned)a->shmem,
                          .hStream = stream,
                          .attrs = (CUlaunchAttribute *)attrs,
                          .numAttrs = nattr};
    struct srv_gate_ticket tk;
    CUresult res;

    srv_gate_begin(s, stream, &tk); /* the tenant's compute share (server/compute_gate.c) */
    if (nattr > 0)
        res = s->drv.cuLaunchKernelEx(&cfg, f, params, NULL);
    else
        res = s->drv.cuLaunchKernel(f, cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX,
                                    cfg.blockDimY, cfg.blockDimZ, cfg.sharedMemBytes, stream,
                                    params, NULL);
    srv_gate_end(s, stream, &tk, res);
    return res;
}

CUresult srv_param_pointers(struct srv_session *s, uint64_t func_id, const void *pbuf,
                            size_t plen, void **f_p, void ***params_p)
{
    struct srv_handle *h = func_handle(s, func_id);
    size_t aligned = (plen + 15) & ~(size_t)15;
    void **params;
    uint8_t *buf;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = layout_of(s, h)) != CUDA_SUCCESS)
        return res;
    for (unsigned i = 0; i < h->nparams; i++)
        if ((size_t)h->layout[2 * i] + h->layout[2 * i + 1] > plen)
            return CUDA_ERROR_INVALID_VALUE;
    /* One scratch block: the parameter bytes (16-byte aligned), then the pointer array. */
    if ((buf = srv_scratch(s, aligned + (h->nparams + 1) * sizeof(*params))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    params = (void **)(buf + aligned);
    if (pbuf != buf)
        memmove(buf, pbuf, plen);
    for (unsigned i = 0; i < h->nparams; i++)
        params[i] = buf + h->layout[2 * i];
    *f_p = h->real;
    *params_p = params;
    return CUDA_SUCCESS;
}

CUresult srv_op_launch(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_LAUNCH *a = SRV_ARGS(call, LAUNCH);
    size_t plen = a->params_len, nattr = a->nattr, len;
    CUlaunchAttribute attrs[32];
    void **params, *f;
    uint8_t *buf;
    CUstream stream;
    CUresult res;

    if (func_handle(s, a->func) == NULL || !srv_stream(s, a->stream, &stream))
        return CUDA_ERROR_INVALID_HANDLE;
    len = call->hdr->bulk_len > 0 ? call->hdr->bulk_len : call->msg->data.len;
    if (nattr > 32 || plen > len || len - plen != nattr * sizeof(CUlaunchAttribute))
        return CUDA_ERROR_INVALID_VALUE;
    /* Parameters arrive in the scratch block that srv_param_pointers then works in place. */
    if ((buf = srv_scratch(s, len + 16)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (srv_recv_input(s, call, buf, len) != RG_OK)
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    memcpy(attrs, buf + plen, nattr * sizeof(*attrs));
    if ((res = srv_param_pointers(s, a->func, buf, plen, &f, &params)) != CUDA_SUCCESS)
        return res;
    return launch_now(s, call, f, params, attrs, (unsigned)nattr, stream);
}

/* ---- streams and events ----------------------------------------------------------------- */

CUresult srv_op_stream_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_CREATE *a = SRV_ARGS(call, STREAM_CREATE);
    CUstream st;
    CUresult res =
        s->drv.cuStreamCreateWithPriority(&st, (unsigned)a->flags, (int)(int64_t)a->priority);

    return srv_handle_adopt(s, a->id, PROTO_H_STREAM, res, st);
}

CUresult srv_op_stream_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_DESTROY *a = SRV_ARGS(call, STREAM_DESTROY);
    return srv_handle_destroy(s, a->handle, PROTO_H_STREAM);
}

CUresult srv_op_stream_sync_query(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_SYNCHRONIZE *a = SRV_ARGS(call, STREAM_SYNCHRONIZE);
    CUstream st;

    if (!srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return call->msg->op == PROTO_OP_STREAM_QUERY ? s->drv.cuStreamQuery(st)
                                                  : s->drv.cuStreamSynchronize(st);
}

CUresult srv_op_stream_wait_event(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_STREAM_WAIT_EVENT *a = SRV_ARGS(call, STREAM_WAIT_EVENT);
    CUstream st;
    CUevent ev = handle_real(s, a->event, PROTO_H_EVENT);

    if (ev == NULL || !srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuStreamWaitEvent(st, ev, (unsigned)a->flags);
}

CUresult srv_op_event_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_EVENT_CREATE *a = SRV_ARGS(call, EVENT_CREATE);
    CUevent ev;
    CUresult res = s->drv.cuEventCreate(&ev, (unsigned)a->flags);

    return srv_handle_adopt(s, a->id, PROTO_H_EVENT, res, ev);
}

CUresult srv_op_event_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_EVENT_DESTROY *a = SRV_ARGS(call, EVENT_DESTROY);
    return srv_handle_destroy(s, a->handle, PROTO_H_EVENT);
}

CUresult srv_op_event_record(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_EVENT_RECORD *a = SRV_ARGS(call, EVENT_RECORD);
    CUstream st;
    CUevent ev = handle_real(s, a->event, PROTO_H_EVENT);

    if (ev == NULL || !srv_stream(s, a->stream, &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuEventRecordWithFlags(ev, st, (unsigned)a->flags);
}

CUresult srv_op_event_sync_query(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_EVENT_SYNCHRONIZE *a = SRV_ARGS(call, EVENT_SYNCHRONIZE);
    CUevent ev = handle_real(s, a->event, PROTO_H_EVENT);

    if (ev == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return call->msg->op == PROTO_OP_EVENT_QUERY ? s->drv.cuEventQuery(ev)
                                                 : s->drv.cuEventSynchronize(ev);
}

CUresult srv_op_event_elapsed(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_EVENT_ELAPSED *a = SRV_ARGS(call, EVENT_ELAPSED);
    CUevent start = handle_real(s, a->start, PROTO_H_EVENT);
    CUevent end = handle_real(s, a->end, PROTO_H_EVENT);
    float ms;
    uint32_t bits;
    CUresult res;

    if (start == NULL || end == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuEventElapsedTime(&ms, start, end);
    if (res == CUDA_SUCCESS) {
        memcpy(&bits, &ms, sizeof(bits));
        call->out[call->nout++] = bits;
    }
    return res;
}

/* ---- occupancy -------------------------------------------------------------------------- */

CUresult srv_op_occ_blocks(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_OCC_MAX_BLOCKS *a = SRV_ARGS(call, OCC_MAX_BLOCKS);
    struct srv_handle *h = func_handle(s, a->func);
    int n;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, h->real, (int)a->block,
                                                                      a->dsmem, (unsigned)a->flags);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = (uint64_t)n;
    return res;
}

CUresult srv_op_occ_clusters(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_OCC_MAX_CLUSTERS *a = SRV_ARGS(call, OCC_MAX_CLUSTERS);
    struct srv_handle *h = func_handle(s, a->func);
    CUlaunchAttribute attrs[32];
    CUlaunchConfig cfg = {(unsigned)a->gx, (unsigned)a->gy,   (unsigned)a->gz,    (unsigned)a->bx,
                          (unsigned)a->by, (unsigned)a->bz,   (unsigned)a->shmem, NULL,
                          attrs,           (unsigned)a->nattr};
    int n;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (a->nattr > 32 || call->msg->data.len != a->nattr * sizeof(CUlaunchAttribute))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(attrs, call->msg->data.data, call->msg->data.len);
    res = s->drv.cuOccupancyMaxActiveClusters(&n, h->real, &cfg);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = (uint64_t)n;
    return res;
}

CUresult srv_op_occ_dsmem(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_OCC_AVAIL_DSMEM *a = SRV_ARGS(call, OCC_AVAIL_DSMEM);
    struct srv_handle *h = func_handle(s, a->func);
    size_t n;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res =
        s->drv.cuOccupancyAvailableDynamicSMemPerBlock(&n, h->real, (int)a->blocks, (int)a->block);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = n;
    return res;
}

CUresult srv_op_occ_potential(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_OCC_MAX_POTENTIAL_BLOCK *a = SRV_ARGS(call, OCC_MAX_POTENTIAL_BLOCK);
    struct srv_handle *h = func_handle(s, a->func);
    int grid, block;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, h->real, NULL, a->dsmem,
                                                           (int)a->limit, (unsigned)a->flags);
    if (res == CUDA_SUCCESS) {
        call->out[call->nout++] = (uint64_t)grid;
        call->out[call->nout++] = (uint64_t)block;
    }
    return res;
}
