/* rgpuNcclCall (client/rgpu_ext.h): the NCCL shim's operations ride the session's call stream,
 * in order with the application's launches and copies. */
#include "client.h"
#include "rgpu_ext.h"

CLI_EXPORT CUresult rgpuNcclCall(struct rgpu_nccl_call *c)
{
    struct cli_call call = {0};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (c == NULL || c->size < sizeof(*c) || c->op < PROTO_OP_NCCL_GET_VERSION ||
        c->op > PROTO_OP_NCCL_REDOP_DESTROY || c->nargs > RGPU_NCCL_MAX_ARGS ||
        c->nargs > CLI_CALL_MAX_ARGS)
        return CUDA_ERROR_INVALID_VALUE;
    call.op = c->op;
    call.nargs = c->nargs;
    for (unsigned i = 0; i < c->nargs; i++)
        call.args[i] = c->args[i];
    if (c->stream_arg < c->nargs &&
        (res = cli_stream_arg((CUstream)(uintptr_t)c->args[c->stream_arg], false,
                              &call.args[c->stream_arg])) != CUDA_SUCCESS)
        return res;
    call.data = c->data;
    call.data_len = (size_t)c->data_len;
    if (c->async)
        return cli_call_async(&call);
    call.out = c->out;
    call.out_cap = 4;
    call.rdata = c->rdata;
    call.rdata_cap = (size_t)c->rdata_cap;
    res = cli_call_sync(&call);
    c->nout = call.nout;
    c->rdata_len = call.rdata_len;
    return res;
}
