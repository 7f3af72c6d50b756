/* Contexts, modules and libraries, functions and kernels, launches, streams, events and
 * occupancy; and the dispatch table of every op. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/module_cache.h"
#include "server/lanes.h"
#include "server/session.h"
#include "server/tenancy.h"

#define ARG(i) (call->msg->args[i])
#define NAME_MAX_LEN 4096

/* The handler tables of the other handlers_*.c files (each op is in exactly one table). */
extern const srv_handler_fn srv_mem_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_graph_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_vmm_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_graph_node_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_memcpy_2d_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_link_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_status_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_stream_attr_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_device_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_module_names_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_array_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_rdma_copy_handlers[PROTO_OP_COUNT];
extern const srv_handler_fn srv_ipc_handlers[PROTO_OP_COUNT];


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

static CUresult h_nop(struct srv_session *s, struct srv_call *call) { return CUDA_SUCCESS; }

static CUresult h_ctx_create(struct srv_session *s, struct srv_call *call)
{
    CUcontext ctx;
    CUresult res;

    if (ARG(2) >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    if (s->nctx >= SRV_MAX_CONTEXTS) /* each holds device memory and driver state */
        return CUDA_ERROR_OUT_OF_MEMORY;
    res = s->drv.cuCtxCreate(&ctx, NULL, (unsigned)ARG(1), s->devices[ARG(2)]);
    if ((res = srv_handle_adopt(s, ARG(0), PROTO_H_CTX, res, ctx)) != CUDA_SUCCESS)
        return res;
    s->nctx++;
    srv_handle_get(s, ARG(0), PROTO_H_CTX)->size = ARG(2); /* its device, for the gate */
    s->current_ctx = ARG(0);
    return CUDA_SUCCESS;
}

static CUresult h_ctx_destroy(struct srv_session *s, struct srv_call *call)
{
    CUcontext ctx = handle_real(s, ARG(0), PROTO_H_CTX);

    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    srv_gate_forget_context(s);
    srv_ctx_limits_forget(s, ARG(0));
    s->nctx--;
    srv_handle_del(s, ARG(0));
    srv_staging_release(s, ARG(0));
    s->current_ctx = 0;
    return s->drv.cuCtxDestroy(ctx);
}

static CUresult h_ctx_sync(struct srv_session *s, struct srv_call *call)
{
    return s->drv.cuCtxSynchronize();
}

static CUresult h_ctx_set_limit(struct srv_session *s, struct srv_call *call)
{
    return srv_ctx_set_limit(s, (CUlimit)ARG(0), ARG(1));
}

static CUresult h_ctx_get_limit(struct srv_session *s, struct srv_call *call)
{
    size_t v;
    CUresult res = s->drv.cuCtxGetLimit(&v, (CUlimit)ARG(0));

    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = v;
    return res;
}

static CUresult h_ctx_cache(struct srv_session *s, struct srv_call *call)
{
    return s->drv.cuCtxSetCacheConfig((CUfunc_cache)ARG(0));
}

static CUresult h_primary_reset(struct srv_session *s, struct srv_call *call)
{
    if (ARG(0) >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    srv_gate_forget_context(s);
    s->nallocs = 0; /* the reset frees them all */
    s->mem_used = 0;
    srv_staging_release(s, PROTO_PRIMARY_CTX_ID(ARG(0)));
    s->current_ctx = 0;
    return s->drv.cuDevicePrimaryCtxReset(s->devices[ARG(0)]);
}

static CUresult h_primary_flags(struct srv_session *s, struct srv_call *call)
{
    if (ARG(0) >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_DEVICE;
    return s->drv.cuDevicePrimaryCtxSetFlags(s->devices[ARG(0)], (unsigned)ARG(1));
}

/* ---- modules and libraries -------------------------------------------------------------- */



/* Images come inline, as bulk, or from the module cache by hash (server/module_cache.c). */
static CUresult h_module_load(struct srv_session *s, struct srv_call *call)
{
    void *image;
    size_t len, before;
    CUmodule mod;
    CUresult res = srv_image_take(s, call, &image, &len);

    if (res != CUDA_SUCCESS)
        return res;
    before = srv_mem_free_now(s);
    res = s->drv.cuModuleLoadData(&mod, image);
    srv_image_release(s, call, image, len, res == CUDA_SUCCESS);
    res = srv_handle_adopt(s, ARG(0), PROTO_H_MODULE, res, mod);
    return res == CUDA_SUCCESS ? srv_load_charge(s, ARG(0), PROTO_H_MODULE, before) : res;
}

static CUresult h_library_load(struct srv_session *s, struct srv_call *call)
{
    size_t before = srv_mem_free_now(s);
    CUlibrary lib;
    CUresult res = srv_library_load(s, call, &lib); /* server/library_image.c */

    res = srv_handle_adopt(s, ARG(0), PROTO_H_LIBRARY, res, lib);
    return res == CUDA_SUCCESS ? srv_load_charge(s, ARG(0), PROTO_H_LIBRARY, before) : res;
}

static CUresult h_unload(struct srv_session *s, struct srv_call *call)
{
    unsigned type = call->msg->op == PROTO_OP_MODULE_UNLOAD ? PROTO_H_MODULE : PROTO_H_LIBRARY;

    return srv_handle_destroy(s, ARG(0), type);
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

static CUresult h_get_by_name(struct srv_session *s, struct srv_call *call)
{
    char name[NAME_MAX_LEN];
    bool kernel = call->msg->op == PROTO_OP_LIBRARY_GET_KERNEL;
    void *owner = handle_real(s, ARG(1), kernel ? PROTO_H_LIBRARY : PROTO_H_MODULE);
    void *real;
    CUresult res;

    if (owner == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!call_name(call, name))
        return CUDA_ERROR_INVALID_VALUE;
    res = kernel ? s->drv.cuLibraryGetKernel((CUkernel *)&real, owner, name)
                 : s->drv.cuModuleGetFunction((CUfunction *)&real, owner, name);
    if (res == CUDA_SUCCESS)
        res = bind_new(s, ARG(0), kernel ? PROTO_H_KERNEL : PROTO_H_FUNCTION, real);
    return res;
}

static CUresult h_get_global(struct srv_session *s, struct srv_call *call)
{
    char name[NAME_MAX_LEN];
    bool lib = call->msg->op == PROTO_OP_LIBRARY_GET_GLOBAL;
    void *owner = handle_real(s, ARG(0), lib ? PROTO_H_LIBRARY : PROTO_H_MODULE);
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

static CUresult h_library_get_module(struct srv_session *s, struct srv_call *call)
{
    void *lib = handle_real(s, ARG(1), PROTO_H_LIBRARY);
    CUmodule mod;
    CUresult res;

    if (lib == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuLibraryGetModule(&mod, lib);
    if (res == CUDA_SUCCESS)
        res = bind_new(s, ARG(0), PROTO_H_MODULE, mod);
    /* Owned by the library: bound for lookups, never unloaded on its own. */
    if (res == CUDA_SUCCESS)
        srv_handle_get(s, ARG(0), PROTO_H_MODULE)->borrowed = true;
    return res;
}

static CUresult h_kernel_get_function(struct srv_session *s, struct srv_call *call)
{
    void *kernel = handle_real(s, ARG(1), PROTO_H_KERNEL);
    CUfunction f;
    CUresult res;

    if (kernel == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuKernelGetFunction(&f, kernel);
    return res == CUDA_SUCCESS ? bind_new(s, ARG(0), PROTO_H_FUNCTION, f) : res;
}

/* ---- functions and launches ------------------------------------------------------------- */

static CUresult h_func_get_attr(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *h = func_handle(s, ARG(0));
    int v;
    CUresult res;

    if (h == NULL || ARG(2) >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_HANDLE;
    res = PROTO_ID_TYPE(ARG(0)) == PROTO_H_KERNEL
              ? s->drv.cuKernelGetAttribute(&v, (CUfunction_attribute)ARG(1), h->real,
                                            s->devices[ARG(2)])
              : s->drv.cuFuncGetAttribute(&v, (CUfunction_attribute)ARG(1), h->real);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = (uint64_t)(int64_t)v;
    return res;
}

static CUresult h_func_set_attr(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *h = func_handle(s, ARG(0));

    if (h == NULL || ARG(3) >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_HANDLE;
    if (PROTO_ID_TYPE(ARG(0)) == PROTO_H_KERNEL)
        return s->drv.cuKernelSetAttribute((CUfunction_attribute)ARG(1), (int)ARG(2), h->real,
                                           s->devices[ARG(3)]);
    return s->drv.cuFuncSetAttribute(h->real, (CUfunction_attribute)ARG(1), (int)ARG(2));
}

static CUresult h_func_cache(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *h = func_handle(s, ARG(0));

    if (h == NULL || ARG(2) >= (uint64_t)s->ndevices)
        return CUDA_ERROR_INVALID_HANDLE;
    if (PROTO_ID_TYPE(ARG(0)) == PROTO_H_KERNEL)
        return s->drv.cuKernelSetCacheConfig(h->real, (CUfunc_cache)ARG(1), s->devices[ARG(2)]);
    return s->drv.cuFuncSetCacheConfig(h->real, (CUfunc_cache)ARG(1));
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

static CUresult h_param_layout(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *h = func_handle(s, ARG(0));
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
    CUlaunchConfig cfg = {
        .gridDimX = (unsigned)ARG(1), .gridDimY = (unsigned)ARG(2), .gridDimZ = (unsigned)ARG(3),
        .blockDimX = (unsigned)ARG(4), .blockDimY = (unsigned)ARG(5),
        .blockDimZ = (unsigned)ARG(6), .sharedMemBytes = (unsigned)ARG(7), .hStream = stream,
        .attrs = (CUlaunchAttribute *)attrs, .numAttrs = nattr};
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
    bool in_scratch;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = layout_of(s, h)) != CUDA_SUCCESS)
        return res;
    for (unsigned i = 0; i < h->nparams; i++)
        if ((size_t)h->layout[2 * i] + h->layout[2 * i + 1] > plen)
            return CUDA_ERROR_INVALID_VALUE;
    /* One scratch block: the parameter bytes (16-byte aligned), then the pointer array. When
     * the bytes already sit in scratch, growing it moves them (and frees where pbuf points). */
    in_scratch = pbuf == s->scratch;
    if ((buf = srv_scratch(s, aligned + (h->nparams + 1) * sizeof(*params))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    params = (void **)(buf + aligned);
    if (!in_scratch)
        memmove(buf, pbuf, plen);
    for (unsigned i = 0; i < h->nparams; i++)
        params[i] = buf + h->layout[2 * i];
    *f_p = h->real;
    *params_p = params;
    return CUDA_SUCCESS;
}

static CUresult h_launch(struct srv_session *s, struct srv_call *call)
{
    size_t plen = ARG(9), nattr = ARG(10), len;
    CUlaunchAttribute attrs[32];
    void **params, *f;
    uint8_t *buf;
    CUstream stream;
    CUresult res;

    if (func_handle(s, ARG(0)) == NULL || !srv_stream(s, ARG(8), &stream))
        return CUDA_ERROR_INVALID_HANDLE;
    len = call->hdr->bulk_len > 0 ? call->hdr->bulk_len : call->msg->data.len;
    if (nattr > 32 || plen > len || len - plen != nattr * sizeof(CUlaunchAttribute) ||
        plen > SRV_LAUNCH_PARAMS_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    /* Parameters arrive in the scratch block that srv_param_pointers then works in place. */
    if ((buf = srv_scratch(s, len + 16)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (srv_recv_input(s, call, buf, len) != RG_OK)
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    memcpy(attrs, buf + plen, nattr * sizeof(*attrs));
    if ((res = srv_param_pointers(s, ARG(0), buf, plen, &f, &params)) != CUDA_SUCCESS)
        return res;
    return launch_now(s, call, f, params, attrs, (unsigned)nattr, stream);
}

/* ---- streams and events ----------------------------------------------------------------- */

static CUresult h_stream_create(struct srv_session *s, struct srv_call *call)
{
    CUstream st;
    CUresult res = s->drv.cuStreamCreateWithPriority(&st, (unsigned)ARG(1), (int)(int64_t)ARG(2));

    return srv_handle_adopt(s, ARG(0), PROTO_H_STREAM, res, st);
}

static CUresult h_stream_destroy(struct srv_session *s, struct srv_call *call)
{
    return srv_handle_destroy(s, ARG(0), PROTO_H_STREAM);
}

static CUresult h_stream_sync_query(struct srv_session *s, struct srv_call *call)
{
    CUstream st;

    if (!srv_stream(s, ARG(0), &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return call->msg->op == PROTO_OP_STREAM_QUERY ? s->drv.cuStreamQuery(st)
                                                  : s->drv.cuStreamSynchronize(st);
}

static CUresult h_stream_wait_event(struct srv_session *s, struct srv_call *call)
{
    CUstream st;
    CUevent ev = handle_real(s, ARG(1), PROTO_H_EVENT);

    if (ev == NULL || !srv_stream(s, ARG(0), &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuStreamWaitEvent(st, ev, (unsigned)ARG(2));
}

static CUresult h_event_create(struct srv_session *s, struct srv_call *call)
{
    CUevent ev;
    CUresult res = s->drv.cuEventCreate(&ev, (unsigned)ARG(1));

    return srv_handle_adopt(s, ARG(0), PROTO_H_EVENT, res, ev);
}

static CUresult h_event_destroy(struct srv_session *s, struct srv_call *call)
{
    return srv_handle_destroy(s, ARG(0), PROTO_H_EVENT);
}

static CUresult h_event_record(struct srv_session *s, struct srv_call *call)
{
    CUstream st;
    CUevent ev = handle_real(s, ARG(0), PROTO_H_EVENT);

    if (ev == NULL || !srv_stream(s, ARG(1), &st))
        return CUDA_ERROR_INVALID_HANDLE;
    return s->drv.cuEventRecordWithFlags(ev, st, (unsigned)ARG(2));
}

static CUresult h_event_sync_query(struct srv_session *s, struct srv_call *call)
{
    CUevent ev = handle_real(s, ARG(0), PROTO_H_EVENT);

    if (ev == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    return call->msg->op == PROTO_OP_EVENT_QUERY ? s->drv.cuEventQuery(ev)
                                                 : s->drv.cuEventSynchronize(ev);
}

static CUresult h_event_elapsed(struct srv_session *s, struct srv_call *call)
{
    CUevent a = handle_real(s, ARG(0), PROTO_H_EVENT), b = handle_real(s, ARG(1), PROTO_H_EVENT);
    float ms;
    uint32_t bits;
    CUresult res;

    if (a == NULL || b == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuEventElapsedTime(&ms, a, b);
    if (res == CUDA_SUCCESS) {
        memcpy(&bits, &ms, sizeof(bits));
        call->out[call->nout++] = bits;
    }
    return res;
}

/* ---- occupancy -------------------------------------------------------------------------- */

static CUresult h_occ_blocks(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *h = func_handle(s, ARG(0));
    int n;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, h->real, (int)ARG(1),
                                                                      ARG(2), (unsigned)ARG(3));
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = (uint64_t)n;
    return res;
}

static CUresult h_occ_clusters(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *h = func_handle(s, ARG(0));
    CUlaunchAttribute attrs[32];
    CUlaunchConfig cfg = {(unsigned)ARG(1), (unsigned)ARG(2), (unsigned)ARG(3), (unsigned)ARG(4),
                          (unsigned)ARG(5), (unsigned)ARG(6), (unsigned)ARG(7), NULL, attrs,
                          (unsigned)ARG(8)};
    int n;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (ARG(8) > 32 || call->msg->data.len != ARG(8) * sizeof(CUlaunchAttribute))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(attrs, call->msg->data.data, call->msg->data.len);
    res = s->drv.cuOccupancyMaxActiveClusters(&n, h->real, &cfg);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = (uint64_t)n;
    return res;
}

static CUresult h_occ_dsmem(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *h = func_handle(s, ARG(0));
    size_t n;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuOccupancyAvailableDynamicSMemPerBlock(&n, h->real, (int)ARG(1), (int)ARG(2));
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = n;
    return res;
}

static CUresult h_occ_potential(struct srv_session *s, struct srv_call *call)
{
    struct srv_handle *h = func_handle(s, ARG(0));
    int grid, block;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, h->real, NULL, ARG(1),
                                                           (int)ARG(2), (unsigned)ARG(3));
    if (res == CUDA_SUCCESS) {
        call->out[call->nout++] = (uint64_t)grid;
        call->out[call->nout++] = (uint64_t)block;
    }
    return res;
}

/* ---- dispatch --------------------------------------------------------------------------- */

#define OP(name, fn, nargs) [PROTO_OP_##name] = fn
static const srv_handler_fn exec_handlers[PROTO_OP_COUNT] = {
    OP(NOP, h_nop, 0), OP(CTX_CREATE, h_ctx_create, 3), OP(CTX_DESTROY, h_ctx_destroy, 1),
    OP(CTX_SYNCHRONIZE, h_ctx_sync, 0), OP(CTX_SET_LIMIT, h_ctx_set_limit, 2),
    OP(CTX_GET_LIMIT, h_ctx_get_limit, 1), OP(CTX_SET_CACHE_CONFIG, h_ctx_cache, 1),
    OP(PRIMARY_CTX_RESET, h_primary_reset, 1), OP(PRIMARY_CTX_SET_FLAGS, h_primary_flags, 2),
    OP(MODULE_LOAD, h_module_load, 1), OP(MODULE_UNLOAD, h_unload, 1),
    OP(MODULE_GET_FUNCTION, h_get_by_name, 2), OP(MODULE_GET_GLOBAL, h_get_global, 1),
    OP(LIBRARY_LOAD, h_library_load, 1), OP(LIBRARY_UNLOAD, h_unload, 1),
    OP(LIBRARY_GET_KERNEL, h_get_by_name, 2), OP(LIBRARY_GET_MODULE, h_library_get_module, 2),
    OP(LIBRARY_GET_GLOBAL, h_get_global, 1), OP(KERNEL_GET_FUNCTION, h_kernel_get_function, 2),
    OP(FUNC_GET_ATTRIBUTE, h_func_get_attr, 3), OP(FUNC_SET_ATTRIBUTE, h_func_set_attr, 4),
    OP(FUNC_SET_CACHE_CONFIG, h_func_cache, 3), OP(FUNC_GET_PARAM_LAYOUT, h_param_layout, 1),
    OP(LAUNCH, h_launch, 11), OP(STREAM_CREATE, h_stream_create, 3),
    OP(STREAM_DESTROY, h_stream_destroy, 1), OP(STREAM_SYNCHRONIZE, h_stream_sync_query, 1),
    OP(STREAM_QUERY, h_stream_sync_query, 1), OP(STREAM_WAIT_EVENT, h_stream_wait_event, 3),
    OP(EVENT_CREATE, h_event_create, 2), OP(EVENT_DESTROY, h_event_destroy, 1),
    OP(EVENT_RECORD, h_event_record, 3), OP(EVENT_SYNCHRONIZE, h_event_sync_query, 1),
    OP(EVENT_QUERY, h_event_sync_query, 1), OP(EVENT_ELAPSED, h_event_elapsed, 2),
    OP(OCC_MAX_BLOCKS, h_occ_blocks, 4), OP(OCC_MAX_CLUSTERS, h_occ_clusters, 9),
    OP(OCC_AVAIL_DSMEM, h_occ_dsmem, 3), OP(OCC_MAX_POTENTIAL_BLOCK, h_occ_potential, 4),
};
#undef OP
#define OP(name, fn, nargs) [PROTO_OP_##name] = nargs
const uint8_t srv_min_args[PROTO_OP_COUNT] = {
    OP(CTX_CREATE, h, 3), OP(CTX_DESTROY, h, 1), OP(CTX_SET_LIMIT, h, 2),
    OP(CTX_GET_LIMIT, h, 1), OP(CTX_SET_CACHE_CONFIG, h, 1), OP(PRIMARY_CTX_RESET, h, 1),
    OP(PRIMARY_CTX_SET_FLAGS, h, 2), OP(MEM_ALLOC, h, 1), OP(MEM_ALLOC_PITCH, h, 3),
    OP(MEM_FREE, h, 1), OP(MEMCPY_HTOD, h, 4), OP(MEMCPY_DTOH, h, 4), OP(MEMCPY_DTOD, h, 5),
    OP(MEMSET, h, 6), OP(MEMSET_2D, h, 8), OP(MODULE_LOAD, h, 1), OP(MODULE_UNLOAD, h, 1),
    OP(MODULE_GET_FUNCTION, h, 2), OP(MODULE_GET_GLOBAL, h, 1), OP(LIBRARY_LOAD, h, 1),
    OP(LIBRARY_UNLOAD, h, 1), OP(LIBRARY_GET_KERNEL, h, 2), OP(LIBRARY_GET_MODULE, h, 2),
    OP(LIBRARY_GET_GLOBAL, h, 1), OP(KERNEL_GET_FUNCTION, h, 2), OP(FUNC_GET_ATTRIBUTE, h, 3),
    OP(FUNC_SET_ATTRIBUTE, h, 4), OP(FUNC_SET_CACHE_CONFIG, h, 3),
    OP(FUNC_GET_PARAM_LAYOUT, h, 1), OP(LAUNCH, h, 11), OP(STREAM_CREATE, h, 3),
    OP(STREAM_DESTROY, h, 1), OP(STREAM_SYNCHRONIZE, h, 1), OP(STREAM_QUERY, h, 1),
    OP(STREAM_WAIT_EVENT, h, 3), OP(EVENT_CREATE, h, 2), OP(EVENT_DESTROY, h, 1),
    OP(EVENT_RECORD, h, 3), OP(EVENT_SYNCHRONIZE, h, 1), OP(EVENT_QUERY, h, 1),
    OP(EVENT_ELAPSED, h, 2), OP(OCC_MAX_BLOCKS, h, 4), OP(OCC_MAX_CLUSTERS, h, 9),
    OP(OCC_AVAIL_DSMEM, h, 3), OP(OCC_MAX_POTENTIAL_BLOCK, h, 4), OP(MEM_ALLOC_ASYNC, h, 2),
    OP(MEM_FREE_ASYNC, h, 2), OP(STREAM_BEGIN_CAPTURE, h, 2), OP(STREAM_END_CAPTURE, h, 2),
    OP(GRAPH_INSTANTIATE, h, 3), OP(GRAPH_LAUNCH, h, 2), OP(GRAPH_UPLOAD, h, 2),
    OP(GRAPH_EXEC_DESTROY, h, 1), OP(GRAPH_DESTROY, h, 1), OP(THREAD_CAPTURE_MODE, h, 1),
    OP(GRAPH_NODE_COUNT, h, 1), OP(MEM_ADDRESS_RESERVE, h, 4), OP(MEM_ADDRESS_FREE, h, 2),
    OP(MEM_CREATE, h, 3), OP(MEM_RELEASE, h, 1), OP(MEM_MAP, h, 5), OP(MEM_UNMAP, h, 2),
    OP(MEM_SET_ACCESS, h, 2), OP(MEM_GET_ACCESS, h, 1), OP(MEM_GET_GRANULARITY, h, 1),
    OP(MEM_POOL_CREATE, h, 1), OP(MEM_POOL_DESTROY, h, 1), OP(MEM_POOL_SET_ATTR, h, 3),
    OP(MEM_POOL_GET_ATTR, h, 2), OP(MEM_POOL_TRIM, h, 2), OP(MEM_POOL_SET_ACCESS, h, 1),
    OP(MEM_ALLOC_FROM_POOL, h, 3), OP(DEVICE_SET_MEM_POOL, h, 2), OP(SHADOW_ALLOC, h, 2),
    OP(MEMCPY_SHADOW, h, 6), OP(SHADOW_WRITE, h, 4), OP(SHADOW_READ, h, 4),
    OP(GRAPH_CREATE, h, 2), OP(GRAPH_ADD_NODE, h, 16), OP(GRAPH_ADD_DEPS, h, 2),
    OP(GRAPH_CLONE, h, 2), OP(GRAPH_GET_NODES, h, 1), OP(GRAPH_EXEC_KERNEL_SET, h, 11),
    OP(GRAPH_EXEC_UPDATE, h, 2), OP(MEMCPY_2D, h, 9), OP(LINK_CREATE, h, 3),
    OP(LINK_ADD_DATA, h, 2), OP(LINK_COMPLETE, h, 1), OP(LINK_DESTROY, h, 1),
    OP(STREAM_SET_ATTR, h, 2), OP(STREAM_GET_ATTR, h, 2), OP(GRAPH_MEM_ATTR, h, 4),
    OP(GRAPH_MEM_TRIM, h, 1), OP(HOST_PLACEHOLDER, h, 1), OP(MODULE_FUNCTION_NAMES, h, 1), OP(DEVICE_STATUS, h, 1),
    OP(ARRAY_CREATE, h, 1), OP(ARRAY_DESTROY, h, 1), OP(MEMCPY_3D, h, 15),
    OP(TEX_OBJECT_CREATE, h, 3), OP(TEX_OBJECT_DESTROY, h, 1), OP(SURF_OBJECT_CREATE, h, 2),
    OP(SURF_OBJECT_DESTROY, h, 1), OP(MEMCPY_HTOD_RDMA, h, 6), OP(MEMCPY_DTOH_RDMA, h, 6),
    OP(MEMCPY_HTOD_LANES, h, 6), OP(MEMCPY_DTOH_LANES, h, 6),
    OP(MODULE_LOAD_JIT, h, 5), OP(LIBRARY_LOAD_JIT, h, 5), OP(GRAPH_COND_HANDLE_CREATE, h, 3),
    OP(STREAM_BEGIN_CAPTURE_TO_GRAPH, h, 4), OP(STREAM_GET_CAPTURE_INFO, h, 3),
    OP(STREAM_UPDATE_CAPTURE_DEPS, h, 4), OP(IPC_GET_MEM_HANDLE, h, 1),
    OP(IPC_OPEN_MEM_HANDLE, h, 1), OP(IPC_CLOSE_MEM_HANDLE, h, 1), OP(IPC_GET_EVENT_HANDLE, h, 1),
    OP(IPC_OPEN_EVENT_HANDLE, h, 1),
    OP(SHADOW_FREE, h, 1),
};
#undef OP

srv_handler_fn srv_handler(unsigned op)
{
    static const srv_handler_fn *const tables[] = {
        exec_handlers,           srv_mem_handlers,          srv_graph_handlers,
        srv_vmm_handlers,        srv_graph_node_handlers,   srv_memcpy_2d_handlers,
        srv_link_handlers,       srv_status_handlers,       srv_stream_attr_handlers,
        srv_device_handlers,     srv_module_names_handlers, srv_array_handlers,
        srv_rdma_copy_handlers,  srv_lanes_handlers,        srv_ipc_handlers,
    };

    if (op >= PROTO_OP_COUNT)
        return NULL;
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
        if (tables[i][op] != NULL)
            return tables[i][op];
    return NULL;
}
