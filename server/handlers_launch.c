/* Functions and kernels: attributes, cache configuration, parameter layouts; kernel launches
 * (gated by the tenant's compute share). */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/session.h"
#include "server/tenancy.h"

CUresult srv_op_func_get_attr(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_FUNC_GET_ATTRIBUTE *a = SRV_ARGS(call, FUNC_GET_ATTRIBUTE);
    struct srv_handle *h = srv_func_handle(s, a->func);
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
    struct srv_handle *h = srv_func_handle(s, a->func);

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
    struct srv_handle *h = srv_func_handle(s, a->func);

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
    struct srv_handle *h = srv_func_handle(s, a->func);
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

CUresult srv_param_pointers(struct srv_session *s, uint64_t func_id, const void *pbuf, size_t plen,
                            void **f_p, void ***params_p)
{
    struct srv_handle *h = srv_func_handle(s, func_id);
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
    if (!in_scratch && plen > 0)
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

    if (srv_func_handle(s, a->func) == NULL || !srv_stream(s, a->stream, &stream))
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
    if ((res = srv_param_pointers(s, a->func, buf, plen, &f, &params)) != CUDA_SUCCESS)
        return res;
    return launch_now(s, call, f, params, attrs, (unsigned)nattr, stream);
}
