/* Contexts: create, destroy, synchronize, limits and cache configuration, primary contexts;
 * and NOP. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/lanes.h"
#include "server/session.h"
#include "server/tenancy.h"

/* The component's state. */
struct contexts_state {
    unsigned n; /* contexts created (CTX_CREATE) and not destroyed, at most SRV_MAX_CONTEXTS */
};

static struct contexts_state *contexts_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_CONTEXTS);
}

unsigned srv_ctx_created(struct srv_session *s)
{
    return contexts_of(s)->n;
}

/* The session's contexts, last of its objects; then the primary contexts it retained. */
static void contexts_teardown(struct srv_session *s, void *state)
{
    srv_handles_destroy_all(s, PROTO_H_CTX);
    for (int d = 0; d < s->ndevices; d++)
        if (s->primary[d] != NULL)
            s->drv.cuDevicePrimaryCtxRelease(s->devices[d]);
}

const struct srv_component srv_contexts_component = {
    .name = "contexts", .state_size = sizeof(struct contexts_state), .teardown = contexts_teardown};

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
    if (contexts_of(s)->n >= SRV_MAX_CONTEXTS) /* each holds device memory and driver state */
        return CUDA_ERROR_OUT_OF_MEMORY;
    res = s->drv.cuCtxCreate(&ctx, NULL, (unsigned)a->flags, s->devices[a->dev]);
    if ((res = srv_handle_adopt(s, a->id, PROTO_H_CTX, res, ctx)) != CUDA_SUCCESS)
        return res;
    contexts_of(s)->n++;
    srv_handle_get(s, a->id, PROTO_H_CTX)->size = a->dev; /* its device, for the gate */
    s->current_ctx = a->id;
    return CUDA_SUCCESS;
}

CUresult srv_op_ctx_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_CTX_DESTROY *a = SRV_ARGS(call, CTX_DESTROY);
    CUcontext ctx = srv_handle_real(s, a->ctx, PROTO_H_CTX);

    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    srv_gate_forget_context(s);
    srv_ctx_limits_forget(s, a->ctx);
    contexts_of(s)->n--;
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
    return srv_ctx_set_limit(s, (CUlimit)a->limit, a->value);
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
    srv_alloc_reset(s); /* the reset frees them all */
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
