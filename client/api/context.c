/* Contexts: the primary context of each device (one stable object for the life of the
 * process, as cudart requires), explicit contexts, and the entry points of the per-thread
 * context stack (the stack itself: context_stack.c). */
#include <stdlib.h>

#include "client/api/api.h"

#define MAX_DEVICES 64

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cli_ctx *primary[MAX_DEVICES];
static int primary_refs[MAX_DEVICES];

struct cli_ctx *cli_primary_ctx(int dev)
{
    struct cli_ctx *ctx;

    if (dev < 0 || dev >= MAX_DEVICES || dev >= cli_device_count())
        return NULL;
    pthread_mutex_lock(&primary_lock);
    ctx = primary[dev];
    if (ctx == NULL && (ctx = calloc(1, sizeof(*ctx))) != NULL) {
        /* the id names the device as its server knows it */
        ctx->h = (struct cli_handle){PROTO_PRIMARY_CTX_ID(cli_device_remote(dev)), PROTO_H_CTX,
                                     CLI_HANDLE_MAGIC};
        ctx->device = dev;
        ctx->sess = cli_device_session(dev);
        ctx->is_primary = true;
        primary[dev] = ctx;
    }
    pthread_mutex_unlock(&primary_lock);
    return ctx;
}

static struct cli_ctx *ctx_check(CUcontext c)
{
    return cli_handle_check(c, PROTO_H_CTX);
}

/* ---- primary contexts ------------------------------------------------------------------- */

CLI_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    struct cli_ctx *ctx;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((ctx = cli_primary_ctx(dev)) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&primary_lock);
    primary_refs[dev]++;
    pthread_mutex_unlock(&primary_lock);
    *pctx = (CUcontext)ctx;
    return CUDA_SUCCESS;
}

static CUresult primary_reset(int dev)
{
    struct cli_ctx *ctx = cli_primary_ctx(dev);
    struct cli_call call = {CLI_ARGS(PRIMARY_CTX_RESET, .dev = cli_device_remote(dev))};

    cli_call_in(&call, ctx);
    cli_ctx_teardown(ctx);
    cli_ctx_limits_forget(ctx, ~0u);
    return cli_call_sync(&call);
}

CLI_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    int refs;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (cli_primary_ctx(dev) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&primary_lock);
    refs = primary_refs[dev] > 0 ? --primary_refs[dev] : -1;
    pthread_mutex_unlock(&primary_lock);
    if (refs < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* At zero CUDA destroys the primary context; the process is usually exiting, so the
     * server's session teardown does the freeing and no round trip is spent here. */
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (cli_primary_ctx(dev) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    return primary_reset(dev);
}

CLI_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    struct cli_ctx *ctx;
    struct cli_call call = {CLI_ARGS(PRIMARY_CTX_SET_FLAGS, .flags = flags)};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if ((ctx = cli_primary_ctx(dev)) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    call.a.PRIMARY_CTX_SET_FLAGS.dev = (uint64_t)cli_device_remote(dev);
    cli_call_in(&call, ctx);
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS)
        ctx->flags = flags;
    return res;
}

CLI_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    struct cli_ctx *ctx;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if ((ctx = cli_primary_ctx(dev)) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if (flags == NULL || active == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary_lock);
    *active = primary_refs[dev] > 0;
    pthread_mutex_unlock(&primary_lock);
    *flags = ctx->flags;
    return CUDA_SUCCESS;
}

/* The v1 ABIs of the three calls above take the same arguments. */
#define CTX_V1_ALIAS(ret_fn, v1_name, params, args)                                                \
    CLI_EXPORT CUresult cli_v1_##ret_fn params __asm__(v1_name);                                   \
    CLI_EXPORT CUresult cli_v1_##ret_fn params                                                     \
    {                                                                                              \
        return ret_fn args;                                                                        \
    }
CTX_V1_ALIAS(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", (CUdevice d), (d))
CTX_V1_ALIAS(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", (CUdevice d), (d))
CTX_V1_ALIAS(cuDevicePrimaryCtxSetFlags, "cuDevicePrimaryCtxSetFlags", (CUdevice d, unsigned f),
             (d, f))

/* ---- explicit contexts ------------------------------------------------------------------ */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    struct cli_ctx *ctx;
    struct cli_call call = {CLI_ARGS(CTX_CREATE)};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (cli_device(dev) == NULL)
        return CUDA_ERROR_INVALID_DEVICE;
    if ((ctx = calloc(1, sizeof(*ctx))) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    cli_handle_init(&ctx->h, PROTO_H_CTX);
    ctx->device = dev;
    ctx->sess = cli_device_session(dev);
    ctx->flags = flags;
    call.a.CTX_CREATE.id = ctx->h.id;
    call.a.CTX_CREATE.flags = flags;
    call.a.CTX_CREATE.dev = (uint64_t)cli_device_remote(dev);
    call.sess = ctx->sess;
    res = cli_call_sync(&call);
    if (res != CUDA_SUCCESS) {
        free(ctx);
        return res;
    }
    (void)cli_ctx_push(ctx); /* a full stack keeps its current context */
    *pctx = (CUcontext)ctx;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                CUdevice dev)
{
    if (params != NULL && (params->execAffinityParams != NULL || params->cigParams != NULL))
        return cli_unsupported("cuCtxCreate (execution affinity / CIG parameters)");
    return ctx_create(pctx, flags, dev);
}

CLI_EXPORT CUresult cli_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags,
                                       CUdevice dev) __asm__("cuCtxCreate_v2");
CLI_EXPORT CUresult cli_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CLI_EXPORT CUresult cuCtxDestroy(CUcontext c)
{
    struct cli_ctx *ctx = ctx_check(c);
    struct cli_call call = {CLI_ARGS(CTX_DESTROY)};
    CUresult res;

    if (ctx == NULL || ctx->is_primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    call.a.CTX_DESTROY.ctx = ctx->h.id;
    cli_call_in(&call, ctx);
    cli_ctx_teardown(ctx);
    res = cli_call_sync(&call);
    cli_ctx_forget(ctx);
    cli_handle_kill(&ctx->h);
    /* The object is not freed: other threads may still name it; they now get an error. */
    return res;
}
CTX_V1_ALIAS(cuCtxDestroy, "cuCtxDestroy", (CUcontext c), (c))

CLI_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)cli_ctx_current();
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    struct cli_ctx *ctx = NULL;

    if (c != NULL && (ctx = ctx_check(c)) == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (c == NULL && cli_ctx_pop(NULL))
        return CUDA_SUCCESS;
    cli_ctx_set_current(ctx);
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuCtxPushCurrent(CUcontext c)
{
    struct cli_ctx *ctx = ctx_check(c);

    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    return cli_ctx_push(ctx) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CTX_V1_ALIAS(cuCtxPushCurrent, "cuCtxPushCurrent", (CUcontext c), (c))

CLI_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    struct cli_ctx *ctx;

    if (!cli_ctx_pop(&ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx != NULL)
        *pctx = (CUcontext)ctx;
    return CUDA_SUCCESS;
}
CTX_V1_ALIAS(cuCtxPopCurrent, "cuCtxPopCurrent", (CUcontext * p), (p))

CLI_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    struct cli_ctx *ctx = cli_ctx_current();

    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext c)
{
    struct cli_ctx *ctx = c != NULL ? ctx_check(c) : cli_ctx_current();

    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct cli_ctx *ctx = cli_ctx_current();

    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *flags = ctx->flags;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuCtxGetId(CUcontext c, unsigned long long *id)
{
    struct cli_ctx *ctx = c != NULL ? ctx_check(c) : cli_ctx_current();

    if (id == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *id = ctx->h.id;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuCtxGetApiVersion(CUcontext c, unsigned int *version)
{
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020;
    return CUDA_SUCCESS;
}

static CUresult ctx_synchronize(struct cli_ctx *ctx)
{
    struct cli_call call = {.op = PROTO_OP_CTX_SYNCHRONIZE};

    if (ctx == NULL)
        return cli_initialized() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_INITIALIZED;
    cli_call_in(&call, ctx);
    return cli_call_sync(&call);
}

CLI_EXPORT CUresult cuCtxSynchronize(void)
{
    return ctx_synchronize(cli_ctx_current());
}

CLI_EXPORT CUresult cuCtxSynchronize_v2(CUcontext c)
{
    return ctx_synchronize(c != NULL ? ctx_check(c) : cli_ctx_current());
}

void cli_ctx_limits_forget(struct cli_ctx *ctx, unsigned mask)
{
    if (ctx != NULL && (__atomic_load_n(&ctx->limits_known, __ATOMIC_RELAXED) & mask))
        __atomic_and_fetch(&ctx->limits_known, ~mask, __ATOMIC_RELEASE);
}

/* A limit the session set is read back once (the driver may round it); after that, and for
 * limits only read, the answer is the context's cached one. The driver grows the stack size by
 * itself for a launch that needs more, so launches forget that one (launch.c). */
CLI_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct cli_call call = {CLI_ARGS(CTX_SET_LIMIT, .limit = limit, .value = value)};
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    res = cli_call_sync(&call);
    cli_ctx_limits_forget(cli_ctx_current(), ~0u);
    return res;
}

CLI_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    uint64_t out[1];
    struct cli_call call = {CLI_ARGS(CTX_GET_LIMIT, .limit = limit), .out = out, .out_cap = 1};
    CUresult res = cli_need_ctx();
    struct cli_ctx *ctx = cli_ctx_current();
    unsigned bit = (unsigned)limit < 16 ? 1u << limit : 0;

    if (res != CUDA_SUCCESS)
        return res;
    if (pvalue == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (bit != 0 && (__atomic_load_n(&ctx->limits_known, __ATOMIC_ACQUIRE) & bit)) {
        *pvalue = (size_t)__atomic_load_n(&ctx->limits[limit], __ATOMIC_RELAXED);
        return CUDA_SUCCESS;
    }
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.nout >= 1) {
        *pvalue = (size_t)out[0];
        if (bit != 0) {
            __atomic_store_n(&ctx->limits[limit], out[0], __ATOMIC_RELAXED);
            __atomic_or_fetch(&ctx->limits_known, bit, __ATOMIC_RELEASE);
        }
    }
    return res;
}

CLI_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    if (pconfig == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pconfig = CU_FUNC_CACHE_PREFER_NONE;
    return cli_need_ctx();
}

CLI_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    struct cli_call call = {CLI_ARGS(CTX_SET_CACHE_CONFIG, .config = config)};
    CUresult res = cli_need_ctx();

    cli_occupancy_forget();
    return res != CUDA_SUCCESS ? res : cli_call_async(&call);
}

CLI_EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    /* Every GPU CUDA 13 supports has this range; no round trip needed. */
    if (least != NULL)
        *least = 0;
    if (greatest != NULL)
        *greatest = -5;
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuCtxResetPersistingL2Cache(void)
{
    struct cli_call call = {.op = PROTO_OP_CTX_RESET_L2};
    CUresult res = cli_need_ctx();

    return res == CUDA_SUCCESS ? cli_call_sync(&call) : res;
}

/* Profiling ranges: a remote GPU is profiled on its own host (e.g. nsys attached to
 * gpu-server's workers); here they are accepted and do nothing. */
CLI_EXPORT CUresult cuProfilerStart(void)
{
    return cli_initialized() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CLI_EXPORT CUresult cuProfilerStop(void)
{
    return cli_initialized() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}
