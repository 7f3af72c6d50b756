/* rgpuNcclCall (client/rgpu_ext.h): the NCCL shim's operations ride the session's call stream,
 * in order with the application's launches and copies. ncclMemAlloc memory is device memory in
 * the client's records (copies infer directions, pointer attributes answer) until it is freed.
 *
 * The one generic forwarder of the client: the shim hands an op number and its argument words,
 * so the call's arguments are filled as words (call.a.words), not by name with CLI_ARGS. What
 * CLI_ARGS checks at compile time is checked here at run time against the op table
 * (proto_ops[]): an NCCL op, an argument count within the op's, NOREPLY only for a `noreply`
 * op, a stream argument only for a `stream` op. tools/gen_ops.py --check exempts this file by
 * name (and no other) from its rule against positional call arguments. */
#include "client/objects/address_ranges.h"
#include "client/api/api.h"
#include "client/rgpu_ext.h"

_Static_assert(offsetof(struct rgpu_nccl_call, on_send) == RGPU_NCCL_CALL_V1_SIZE,
               "RGPU_NCCL_CALL_V1_SIZE is the size before on_send");

/* After a synchronous call's reply: record or forget NCCL memory. */
static void track_memory(const struct rgpu_nccl_call *c)
{
    struct mem_range r;

    if (c->op == PROTO_OP_NCCL_MEM_ALLOC && c->nout >= 2 && c->out[0] == 0 && c->out[1] != 0)
        addr_range_add(MEM_DEVICE, (uintptr_t)c->out[1], (size_t)c->args[0], cli_ctx_current(), 0);
    else if (c->op == PROTO_OP_NCCL_MEM_FREE && c->nout >= 1 && c->out[0] == 0)
        addr_range_remove(MEM_DEVICE, (uintptr_t)c->args[0], &r);
}

/* Whether c is a call the op table allows (see the top of this file). */
static bool call_valid(const struct rgpu_nccl_call *c)
{
    const struct proto_op_info *op;

    if (c == NULL || c->size < RGPU_NCCL_CALL_V1_SIZE || c->nargs > RGPU_NCCL_MAX_ARGS ||
        !((c->op >= PROTO_OP_NCCL_GET_VERSION && c->op <= PROTO_OP_NCCL_REDOP_DESTROY) ||
          (c->op >= PROTO_OP_NCCL_COLL_EXT && c->op <= PROTO_OP_NCCL_COMM_QUERY)))
        return false;
    op = &proto_ops[c->op];
    return c->nargs >= op->min_args && c->nargs <= op->nargs &&
           (!c->async || (op->flags & PROTO_OPF_NOREPLY)) &&
           (c->stream_arg >= c->nargs || (op->flags & PROTO_OPF_STREAM));
}

CLI_EXPORT CUresult rgpuNcclCall(struct rgpu_nccl_call *c)
{
    struct cli_call call = {0};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!call_valid(c))
        return CUDA_ERROR_INVALID_VALUE;
    call.op = c->op;
    call.nargs = c->nargs;
    for (unsigned i = 0; i < c->nargs; i++)
        call.a.words[i] = c->args[i];
    if (c->stream_arg < c->nargs &&
        (res = cli_stream_arg((CUstream)(uintptr_t)c->args[c->stream_arg], false,
                              &call.a.words[c->stream_arg])) != CUDA_SUCCESS)
        return res;
    call.data = c->data;
    call.data_len = (size_t)c->data_len;
    if (c->size >= sizeof(*c)) {
        call.on_send = c->on_send;
        call.on_send_arg = c->on_send_arg;
    }
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
