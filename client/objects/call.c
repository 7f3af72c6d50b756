/* The call API (objects.h): a call carries its context explicitly to the session (the wire
 * layer, session.c), which never asks the context layer; these fill it in from the calling
 * thread's current context when the caller left it 0. */
#include "client/objects/objects.h"

static struct cli_call *in_ctx(struct cli_call *call)
{
    struct cli_ctx *c;

    /* A call already bound to another server (a device call) goes there without a context. */
    if (call->ctx == 0 && (c = cli_ctx_current()) != NULL &&
        (call->sess == NULL || call->sess == c->sess)) {
        call->ctx = c->h.id;
        call->sess = c->sess;
    }
    return call;
}

void cli_call_in(struct cli_call *call, const struct cli_ctx *ctx)
{
    call->ctx = ctx != NULL ? ctx->h.id : 0;
    call->sess = ctx != NULL ? ctx->sess : NULL;
}

CUresult cli_call_sync(struct cli_call *call)
{
    return cli_session_call(in_ctx(call));
}

CUresult cli_call_async(struct cli_call *call)
{
    return cli_session_send(in_ctx(call));
}

CUresult cli_call_deferred(struct cli_call *call, void *dst, size_t len)
{
    return cli_session_call_deferred(in_ctx(call), dst, len);
}

CUresult cli_call_simple(struct cli_call *call, uint64_t *out)
{
    CUresult res = cli_need_ctx();

    return res != CUDA_SUCCESS ? res : cli_call_device(call, out);
}

CUresult cli_call_device(struct cli_call *call, uint64_t *out)
{
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    call->out = out;
    call->out_cap = out ? 1 : 0;
    res = cli_call_sync(call);
    if (res == CUDA_SUCCESS && out != NULL && call->nout < 1)
        res = CUDA_ERROR_UNKNOWN;
    return res;
}
