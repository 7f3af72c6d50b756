/* NCCL memory, user buffer registration, windows and PreMulSum reduction ops on the worker.
 * ncclMemAlloc memory is charged by its size; a registration or window by the device memory
 * NCCL took to make it (measured around the call). Handles NCCL gave out (registrations,
 * windows) are remembered per communicator: one the application hands back is checked against
 * them before NCCL sees it. */
#include <stdlib.h>
#include <string.h>

#include "common/array_grow.h"
#include "common/log.h"
#include "server/nccl_internal.h"

static bool ready(struct srv_session *s, struct srv_call *call)
{
    if (nccl_lib_ready(s) && nccl_state(s) != NULL)
        return true;
    call->out[call->nout++] = (uint64_t)ncclSystemError;
    return false;
}

CUresult srv_op_nccl_mem_alloc(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_MEM_ALLOC *a = SRV_ARGS(call, NCCL_MEM_ALLOC);
    struct srv_nccl *n;
    void *p = NULL;
    ncclResult_t res;

    if (!ready(s, call))
        return CUDA_SUCCESS;
    n = nccl_state(s);
    if (a->size == 0 || !srv_quota_charge(s, a->size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!rg_array_grow((void **)&n->mems, &n->mem_cap, n->nmems, sizeof(*n->mems), 16)) {
        srv_quota_release(s, a->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if ((res = nccl_lib.MemAlloc(&p, (size_t)a->size)) != ncclSuccess) {
        srv_quota_release(s, a->size);
        p = NULL;
    } else
        n->mems[n->nmems++] = (struct nccl_mem){p, (size_t)a->size};
    call->out[call->nout++] = (uint64_t)res;
    call->out[call->nout++] = (uint64_t)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_mem_free(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_MEM_FREE *a = SRV_ARGS(call, NCCL_MEM_FREE);
    struct srv_nccl *n;

    if (!ready(s, call))
        return CUDA_SUCCESS;
    n = nccl_state(s);
    for (size_t i = 0; i < n->nmems; i++)
        if ((uint64_t)(uintptr_t)n->mems[i].ptr == a->dptr) {
            call->out[call->nout++] = (uint64_t)nccl_lib.MemFree(n->mems[i].ptr);
            srv_quota_release(s, n->mems[i].size);
            n->mems[i] = n->mems[--n->nmems];
            return CUDA_SUCCESS;
        }
    call->out[call->nout++] = ncclInvalidArgument; /* not this session's */
    return CUDA_SUCCESS;
}

/* Register (window or not) buf with comm id: out result, handle. */
static CUresult reg_add(struct srv_session *s, struct srv_call *call, uint64_t id, uint64_t buf,
                        uint64_t size, int flags, bool window)
{
    struct srv_nccl *n = nccl_state(s);
    struct nccl_rec *r;
    ncclComm_t comm;
    ncclResult_t res;
    void *handle = NULL;
    size_t before, after;
    CUcontext ctx = NULL;

    if ((comm = nccl_comm_of(s, call, id)) == NULL)
        return CUDA_SUCCESS;
    if (window && nccl_lib.CommWindowRegister == NULL) {
        call->out[call->nout++] = (uint64_t)ncclInvalidUsage;
        return CUDA_SUCCESS;
    }
    s->drv.cuCtxGetCurrent(&ctx);
    before = nccl_free_in(s, ctx);
    res = window ? nccl_lib.CommWindowRegister(comm, (void *)(uintptr_t)buf, (size_t)size,
                                               (ncclWindow_t *)&handle, flags)
                 : nccl_lib.CommRegister(comm, (void *)(uintptr_t)buf, (size_t)size, &handle);
    after = nccl_free_in(s, ctx);
    pthread_mutex_lock(&n->lock);
    if (res == ncclSuccess && handle != NULL && (r = nccl_rec_find(n, id)) != NULL &&
        r->comm == comm) {
        uint64_t took = before > after ? before - after : 0;

        if (!rg_array_grow((void **)&r->regs, &r->reg_cap, r->nregs, sizeof(*r->regs), 8) ||
            !srv_quota_charge(s, took)) {
            rg_warn("nccl: communicator %llu: a %s took %llu bytes of device memory, over the "
                    "quota",
                    (unsigned long long)id, window ? "window" : "registration",
                    (unsigned long long)took);
            if (window)
                nccl_lib.CommWindowDeregister(comm, (ncclWindow_t)handle);
            else
                nccl_lib.CommDeregister(comm, handle);
            res = ncclUnhandledCudaError;
            handle = NULL;
        } else
            r->regs[r->nregs++] = (struct nccl_reg){handle, took, window};
    }
    pthread_mutex_unlock(&n->lock);
    call->out[call->nout++] = (uint64_t)res;
    call->out[call->nout++] = (uint64_t)(uintptr_t)handle;
    return CUDA_SUCCESS;
}

/* Deregister handle of comm id; one that NCCL did not give this communicator is refused. */
static CUresult reg_del(struct srv_session *s, struct srv_call *call, uint64_t id, uint64_t handle,
                        bool window)
{
    struct srv_nccl *n = nccl_state(s);
    struct nccl_rec *r;
    ncclComm_t comm;
    ncclResult_t res = ncclInvalidArgument;

    if ((comm = nccl_comm_of(s, call, id)) == NULL)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&n->lock);
    if ((r = nccl_rec_find(n, id)) != NULL)
        for (size_t i = 0; i < r->nregs; i++)
            if ((uint64_t)(uintptr_t)r->regs[i].handle == handle && r->regs[i].window == window) {
                res = window ? nccl_lib.CommWindowDeregister(comm, (ncclWindow_t)r->regs[i].handle)
                             : nccl_lib.CommDeregister(comm, r->regs[i].handle);
                srv_quota_release(s, r->regs[i].charged);
                r->regs[i] = r->regs[--r->nregs];
                break;
            }
    pthread_mutex_unlock(&n->lock);
    if (res == ncclInvalidArgument && handle != 0)
        rg_warn("nccl: communicator %llu: a %s handle it did not give was refused",
                (unsigned long long)id, window ? "window" : "registration");
    call->out[call->nout++] = (uint64_t)res;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_register(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_REGISTER *a = SRV_ARGS(call, NCCL_REGISTER);

    return ready(s, call) ? reg_add(s, call, a->comm, a->buf, a->size, 0, false) : CUDA_SUCCESS;
}

CUresult srv_op_nccl_deregister(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_DEREGISTER *a = SRV_ARGS(call, NCCL_DEREGISTER);

    return ready(s, call) ? reg_del(s, call, a->comm, a->handle, false) : CUDA_SUCCESS;
}

CUresult srv_op_nccl_window_register(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_WINDOW_REGISTER *a = SRV_ARGS(call, NCCL_WINDOW_REGISTER);

    return ready(s, call)
               ? reg_add(s, call, a->comm, a->buf, a->size, (int)(uint32_t)a->flags, true)
               : CUDA_SUCCESS;
}

CUresult srv_op_nccl_window_deregister(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_WINDOW_DEREGISTER *a = SRV_ARGS(call, NCCL_WINDOW_DEREGISTER);

    return ready(s, call) ? reg_del(s, call, a->comm, a->win, true) : CUDA_SUCCESS;
}

CUresult srv_op_nccl_redop_create(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_REDOP_CREATE *a = SRV_ARGS(call, NCCL_REDOP_CREATE);
    ncclComm_t comm;
    ncclRedOp_t op = ncclSum;
    uint64_t value = a->scalar;
    void *scalar =
        a->residence == ncclScalarHostImmediate ? (void *)&value : (void *)(uintptr_t)value;

    if (a->type >= ncclNumTypes || a->residence > ncclScalarHostImmediate)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ready(s, call) || (comm = nccl_comm_of(s, call, a->comm)) == NULL)
        return CUDA_SUCCESS;
    call->out[call->nout++] = (uint64_t)nccl_lib.RedOpCreatePreMulSum(
        &op, scalar, (ncclDataType_t)a->type, (ncclScalarResidence_t)a->residence, comm);
    call->out[call->nout++] = (uint64_t)op;
    return CUDA_SUCCESS;
}

CUresult srv_op_nccl_redop_destroy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_NCCL_REDOP_DESTROY *a = SRV_ARGS(call, NCCL_REDOP_DESTROY);
    ncclComm_t comm;

    if (!ready(s, call) || (comm = nccl_comm_of(s, call, a->comm)) == NULL)
        return CUDA_SUCCESS;
    call->out[call->nout++] = (uint64_t)nccl_lib.RedOpDestroy((ncclRedOp_t)(uint32_t)a->op, comm);
    return CUDA_SUCCESS;
}
