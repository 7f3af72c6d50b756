/* Kernel launches (parameters marshalled by the function's layout, fetched once) and function
 * and kernel attributes (cached; a change makes occupancy.c forget its cached answers). */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "client/bulk/host_mirror.h"
#include "client/api/image_params.h"
#include "client/api/module.h"

#define LAUNCH_PARAMS_MAX (64u << 10)
#define LAUNCH_ATTRS_MAX  32u

/* f's layout: n parameters at off[i] of size[i] (copied). */
static CUresult layout_set(struct cli_func *f, unsigned n, const uint32_t *off,
                           const uint32_t *size)
{
    uint32_t *o = calloc(n + 1, sizeof(*o)), *sz = calloc(n + 1, sizeof(*sz));

    if (o == NULL || sz == NULL) {
        free(o);
        free(sz);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    f->params_len = 0;
    for (unsigned i = 0; i < n; i++) {
        o[i] = off[i];
        sz[i] = size[i];
        if (off[i] + (size_t)size[i] > f->params_len)
            f->params_len = off[i] + (size_t)size[i];
    }
    free(f->param_off);
    free(f->param_size);
    f->param_off = o;
    f->param_size = sz;
    f->nparams = n;
    f->layout_known = true;
    return CUDA_SUCCESS;
}

/* The layout as the worker's driver gives it (FUNC_GET_PARAM_LAYOUT): n, offsets, sizes. */
static CUresult layout_ask(struct cli_func *f, unsigned *n_p, uint32_t **off_p, uint32_t **size_p)
{
    unsigned cap = 2 + 2 * 1024, n = 0;
    uint64_t *out = malloc(cap * sizeof(*out));
    struct cli_call call = {CLI_ARGS(FUNC_GET_PARAM_LAYOUT, .func = f->h.id), .out = out,
                            .out_cap = cap};
    CUresult res = out != NULL ? cli_call_sync(&call) : CUDA_ERROR_OUT_OF_MEMORY;

    if (res == CUDA_SUCCESS &&
        (call.nout < 1 || (n = (unsigned)out[0]) > 1024 || call.nout < 1 + 2 * n))
        res = CUDA_ERROR_UNKNOWN;
    *off_p = res == CUDA_SUCCESS ? calloc(n + 1, sizeof(uint32_t)) : NULL;
    *size_p = res == CUDA_SUCCESS ? calloc(n + 1, sizeof(uint32_t)) : NULL;
    if (res == CUDA_SUCCESS && (*off_p == NULL || *size_p == NULL))
        res = CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; res == CUDA_SUCCESS && i < n; i++) {
        (*off_p)[i] = (uint32_t)out[1 + 2 * i];
        (*size_p)[i] = (uint32_t)out[2 + 2 * i];
    }
    if (res != CUDA_SUCCESS) {
        free(*off_p);
        free(*size_p);
    }
    *n_p = n;
    free(out);
    return res;
}

static CUresult layout_fetch(struct cli_func *f)
{
    uint32_t *off, *size;
    unsigned n;
    CUresult res = layout_ask(f, &n, &off, &size);

    if (res == CUDA_SUCCESS) {
        res = layout_set(f, n, off, size);
        free(off);
        free(size);
    }
    return res;
}

/* RGPU_LAYOUT_CHECK=1: a layout read from the image is compared with the driver's. */
static void layout_check(struct cli_func *f)
{
    static int on = -1;
    uint32_t *off, *size;
    unsigned n;
    bool same;

    if (on < 0)
        on = getenv("RGPU_LAYOUT_CHECK") != NULL && strcmp(getenv("RGPU_LAYOUT_CHECK"), "1") == 0;
    if (!on || layout_ask(f, &n, &off, &size) != CUDA_SUCCESS)
        return;
    same = n == f->nparams && (n == 0 || (memcmp(off, f->param_off, n * sizeof(*off)) == 0 &&
                                          memcmp(size, f->param_size, n * sizeof(*size)) == 0));
    if (same)
        rg_info("layout check: %s: %u parameters, as the driver says", f->name, n);
    else
        rg_error("layout check: %s: the image says %u parameters, the driver %u (or other "
                 "offsets or sizes)",
                 f->name, f->nparams, n);
    free(off);
    free(size);
}

void cli_func_layout_from_image(struct cli_func *f, const void *image, size_t len)
{
    uint32_t *off, *size;
    unsigned n;

    if (image == NULL || !cli_image_kernel_params(image, len, f->name, &n, &off, &size))
        return;
    if (layout_set(f, n, off, size) == CUDA_SUCCESS)
        layout_check(f);
    free(off);
    free(size);
}

void cli_func_layout_copy(struct cli_func *to, const struct cli_func *from)
{
    if (from->layout_known)
        (void)layout_set(to, from->nparams, from->param_off, from->param_size);
}

CUresult cli_func_layout(struct cli_func *f)
{
    CUresult res = CUDA_SUCCESS;

    pthread_mutex_lock(&f->lock);
    if (!f->layout_known)
        res = layout_fetch(f);
    pthread_mutex_unlock(&f->lock);
    return res;
}

/* Per-thread buffer for packing launches: the packed call is copied out (into the batch or
 * the socket) before the launch returns, so it is reused and the hot path does not allocate. */
static uint8_t *launch_scratch(size_t len)
{
    static __thread uint8_t *buf;
    static __thread size_t cap;

    if (len + 1 > cap) {
        size_t n = len + 1 < 4096 ? 4096 : len + 1;
        uint8_t *p = realloc(buf, n);
        if (p == NULL)
            return NULL;
        buf = p;
        cap = n;
    }
    return buf;
}

/* Packs kernelParams (or the `extra` buffer) and nattr launch attributes into one buffer. */
static CUresult pack_params(struct cli_func *f, void **params, void **extra,
                            const CUlaunchAttribute *attrs, unsigned nattr, uint8_t **buf_p,
                            size_t *params_len_p, size_t *len_p)
{
    const void *xbuf = NULL;
    size_t plen = 0, alen = nattr * sizeof(CUlaunchAttribute);
    uint8_t *buf;
    CUresult res;

    for (unsigned i = 0; extra != NULL && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            xbuf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            plen = *(size_t *)extra[i + 1];
    }
    if (xbuf == NULL) {
        if ((res = cli_func_layout(f)) != CUDA_SUCCESS)
            return res;
        plen = f->params_len;
        if (f->nparams > 0 && params == NULL)
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (plen > LAUNCH_PARAMS_MAX || nattr > LAUNCH_ATTRS_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if ((buf = launch_scratch(plen + alen)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(buf, 0, plen);
    if (xbuf != NULL)
        memcpy(buf, xbuf, plen);
    for (unsigned i = 0; xbuf == NULL && i < f->nparams; i++)
        memcpy(buf + f->param_off[i], params[i], f->param_size[i]);
    if (alen > 0)
        memcpy(buf + plen, attrs, alen);
    *buf_p = buf;
    *params_len_p = plen;
    *len_p = plen + alen;
    return CUDA_SUCCESS;
}

CUresult cli_pack_kernel_params(void *func, void **params, void **extra, uint64_t *id_p,
                                const uint8_t **buf_p, size_t *len_p)
{
    struct cli_func *f = cli_func_check(func);
    uint8_t *buf;
    size_t plen, len;
    CUresult res;

    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = pack_params(f, params, extra, NULL, 0, &buf, &plen, &len)) != CUDA_SUCCESS)
        return res;
    *id_p = f->h.id;
    *buf_p = buf;
    *len_p = plen;
    return CUDA_SUCCESS;
}

struct launch_dims {
    unsigned grid[3], block[3], shmem;
};

static CUresult launch(CUfunction func, const struct launch_dims *d, CUstream stream, void **params,
                       void **extra, const CUlaunchAttribute *attrs, unsigned nattr,
                       bool per_thread)
{
    struct cli_func *f = cli_func_check(func);
    struct cli_call call = {CLI_ARGS(LAUNCH)};
    size_t plen, len;
    uint8_t *buf;
    CUresult res = cli_stream_arg(stream, per_thread, &call.a.LAUNCH.stream);

    if (res != CUDA_SUCCESS)
        return res;
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (nattr > 0 && attrs == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = pack_params(f, params, extra, attrs, nattr, &buf, &plen, &len);
    if (res != CUDA_SUCCESS)
        return res;
    call.a.LAUNCH.func = f->h.id;
    call.a.LAUNCH.gx = d->grid[0], call.a.LAUNCH.gy = d->grid[1], call.a.LAUNCH.gz = d->grid[2];
    call.a.LAUNCH.bx = d->block[0], call.a.LAUNCH.by = d->block[1], call.a.LAUNCH.bz = d->block[2];
    call.a.LAUNCH.shmem = d->shmem;
    call.a.LAUNCH.params_len = plen;
    call.a.LAUNCH.nattr = nattr;
    call.data = buf;
    call.data_len = len;
    cli_mirror_launch(buf, plen); /* pinned host memory it names: mirrored, pushed first */
    cli_ctx_limits_forget(cli_ctx_current(), 1u << CU_LIMIT_STACK_SIZE); /* it may grow */
    return cli_call_async(&call);
}

#define LAUNCH_ARGS                                                                                \
    CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,    \
        unsigned shmem, CUstream s, void **params, void **extra
#define LAUNCH_DIMS                                                                                \
    {                                                                                              \
        {gx, gy, gz}, {bx, by, bz}, shmem                                                          \
    }

CLI_EXPORT CUresult cuLaunchKernel(LAUNCH_ARGS)
{
    struct launch_dims d = LAUNCH_DIMS;

    return launch(f, &d, s, params, extra, NULL, 0, false);
}

CLI_EXPORT CUresult cuLaunchKernel_ptsz(LAUNCH_ARGS)
{
    struct launch_dims d = LAUNCH_DIMS;

    return launch(f, &d, s, params, extra, NULL, 0, true);
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra,
                          bool per_thread)
{
    struct launch_dims d;

    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    d = (struct launch_dims){{c->gridDimX, c->gridDimY, c->gridDimZ},
                             {c->blockDimX, c->blockDimY, c->blockDimZ},
                             c->sharedMemBytes};
    return launch(f, &d, c->hStream, params, extra, c->attrs, c->numAttrs, per_thread);
}

CLI_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params,
                                     void **extra)
{
    return launch_ex(c, f, params, extra, false);
}

CLI_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params,
                                          void **extra)
{
    return launch_ex(c, f, params, extra, true);
}

/* Cooperative launches are launches with the cooperative attribute, as in cuLaunchKernelEx. */
static CUresult launch_cooperative(CUfunction f, const struct launch_dims *d, CUstream s,
                                   void **params, bool per_thread)
{
    CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE, .value.cooperative = 1};

    return launch(f, d, s, params, NULL, &attr, 1, per_thread);
}

#define COOP_ARGS                                                                                  \
    CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,    \
        unsigned shmem, CUstream s, void **params

CLI_EXPORT CUresult cuLaunchCooperativeKernel(COOP_ARGS)
{
    struct launch_dims d = LAUNCH_DIMS;

    return launch_cooperative(f, &d, s, params, false);
}

CLI_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(COOP_ARGS)
{
    struct launch_dims d = LAUNCH_DIMS;

    return launch_cooperative(f, &d, s, params, true);
}

/* ---- parameter info and attributes ------------------------------------------------------ */

static CUresult param_info(void *handle, size_t index, size_t *offset, size_t *size)
{
    struct cli_func *f = cli_func_check(handle);
    CUresult res;

    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = cli_func_layout(f)) != CUDA_SUCCESS)
        return res;
    if (index >= f->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    if (offset != NULL)
        *offset = f->param_off[index];
    if (size != NULL)
        *size = f->param_size[index];
    return CUDA_SUCCESS;
}

CLI_EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t index, size_t *off, size_t *size)
{
    return param_info(func, index, off, size);
}

CLI_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t *off, size_t *size)
{
    return param_info(kernel, index, off, size);
}

/* A kernel's attributes are per device: a call about device dev goes to dev's server (in the
 * current context when it is on that server, else with none). A function's go to its context. */
static void kernel_call_for(struct cli_call *call, const struct cli_func *f, CUdevice dev)
{
    if (f->h.type == PROTO_H_KERNEL)
        call->sess = cli_device_session(dev);
}

static CUresult get_attribute(int *pi, int attrib, void *handle, CUdevice dev)
{
    struct cli_func *f = cli_func_check(handle);
    uint64_t out[1];
    struct cli_call call = {CLI_ARGS(FUNC_GET_ATTRIBUTE), .out = out, .out_cap = 1};
    CUresult res = CUDA_SUCCESS;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (pi == NULL || attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&f->lock);
    if (!(f->attrs_known & (1ull << attrib))) {
        call.a.FUNC_GET_ATTRIBUTE.func = f->h.id;
        call.a.FUNC_GET_ATTRIBUTE.attrib = (uint64_t)attrib;
        call.a.FUNC_GET_ATTRIBUTE.dev = (uint64_t)cli_device_remote(dev);
        kernel_call_for(&call, f, dev);
        res = cli_call_sync(&call);
        if (res == CUDA_SUCCESS && call.nout >= 1) {
            f->attrs[attrib] = (int)(int64_t)out[0];
            f->attrs_known |= 1ull << attrib;
        }
    }
    if (res == CUDA_SUCCESS)
        *pi = f->attrs[attrib];
    pthread_mutex_unlock(&f->lock);
    return res;
}

/* What the driver checks of a function attribute's new value that the client can check too:
 * which attributes are settable, and each one's range. */
static CUresult attribute_value_check(int attrib, int value, CUdevice dev)
{
    int max = 0;

    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (cuDeviceGetAttribute(&max, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                 dev) != CUDA_SUCCESS)
            return CUDA_ERROR_INVALID_DEVICE;
        return value >= 0 && value <= max ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        return value >= -1 && value <= 100 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        return value >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        return value == 0 || value == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        return value >= 0 && value <= 2 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_ERROR_INVALID_VALUE; /* read-only or unknown */
}

/* Sent without waiting (NOREPLY), as a launch is: what the client cannot check (a dynamic
 * shared size that, with the function's static size, exceeds the device's) fails at the
 * worker and is returned by the next synchronizing call. */
static CUresult set_attribute(void *handle, int attrib, int value, CUdevice dev)
{
    struct cli_func *f = cli_func_check(handle);
    struct cli_call call = {CLI_ARGS(FUNC_SET_ATTRIBUTE)};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((res = attribute_value_check(attrib, value, dev)) != CUDA_SUCCESS)
        return res;
    call.a.FUNC_SET_ATTRIBUTE.func = f->h.id;
    call.a.FUNC_SET_ATTRIBUTE.attrib = (uint64_t)attrib;
    call.a.FUNC_SET_ATTRIBUTE.value = (uint64_t)(int64_t)value;
    call.a.FUNC_SET_ATTRIBUTE.dev = (uint64_t)cli_device_remote(dev);
    kernel_call_for(&call, f, dev);
    res = cli_call_async(&call);
    cli_occupancy_forget();
    pthread_mutex_lock(&f->lock);
    f->attrs_known &= ~(1ull << attrib); /* re-read: the driver may round the value */
    pthread_mutex_unlock(&f->lock);
    return res;
}

CLI_EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    struct cli_ctx *ctx = cli_ctx_current();

    return get_attribute(pi, attrib, hfunc, ctx != NULL ? ctx->device : 0);
}

CLI_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    struct cli_ctx *ctx = cli_ctx_current();

    return set_attribute(hfunc, attrib, value, ctx != NULL ? ctx->device : 0);
}

CLI_EXPORT CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel,
                                         CUdevice dev)
{
    return get_attribute(pi, attrib, kernel, dev);
}

CLI_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                         CUdevice dev)
{
    return set_attribute(kernel, attrib, val, dev);
}

static CUresult set_cache_config(void *handle, CUfunc_cache config, CUdevice dev)
{
    struct cli_func *f = cli_func_check(handle);
    struct cli_call call = {CLI_ARGS(FUNC_SET_CACHE_CONFIG)};

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    call.a.FUNC_SET_CACHE_CONFIG.func = f->h.id;
    call.a.FUNC_SET_CACHE_CONFIG.config = config;
    call.a.FUNC_SET_CACHE_CONFIG.dev = (uint64_t)cli_device_remote(dev);
    kernel_call_for(&call, f, dev);
    cli_occupancy_forget();
    return cli_call_async(&call);
}

CLI_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    return set_cache_config(hfunc, config, 0);
}

CLI_EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    return set_cache_config(kernel, config, dev);
}
