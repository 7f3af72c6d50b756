/* rgpuNcclCall (client/rgpu_ext.h): the NCCL shim's operations ride the session's call stream,
 * in order with the application's launches and copies. ncclMemAlloc memory is device memory in
 * the client's records (copies infer directions, pointer attributes answer) until it is freed. */
#include "client.h"
#include "memory_map.h"
#include "rgpu_ext.h"

/* After a synchronous call's reply: record or forget NCCL memory. */
static void track_memory(const struct rgpu_nccl_call *c)
{
    struct mem_range r;

    if (c->op == PROTO_OP_NCCL_MEM_ALLOC && c->nout >= 2 && c->out[0] == 0 && c->out[1] != 0)
        mem_map_add(MEM_DEVICE, (uintptr_t)c->out[1], (size_t)c->args[0], cli_ctx_current(), 0);
    else if (c->op == PROTO_OP_NCCL_MEM_FREE && c->nout >= 1 && c->out[0] == 0)
        mem_map_remove(MEM_DEVICE, (uintptr_t)c->args[0], &r);
}

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
    if (res == CUDA_SUCCESS)
        track_memory(c);
    return res;
}
