/* Occupancy queries of a function or kernel. */
#include <stdlib.h>
#include <string.h>

#include "server/session.h"

CUresult srv_op_occ_blocks(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_OCC_MAX_BLOCKS *a = SRV_ARGS(call, OCC_MAX_BLOCKS);
    struct srv_handle *h = srv_func_handle(s, a->func);
    int n;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, h->real, (int)a->block,
                                                                      a->dsmem, (unsigned)a->flags);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = (uint64_t)n;
    return res;
}

CUresult srv_op_occ_clusters(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_OCC_MAX_CLUSTERS *a = SRV_ARGS(call, OCC_MAX_CLUSTERS);
    struct srv_handle *h = srv_func_handle(s, a->func);
    CUlaunchAttribute attrs[32];
    CUlaunchConfig cfg = {(unsigned)a->gx, (unsigned)a->gy,   (unsigned)a->gz,    (unsigned)a->bx,
                          (unsigned)a->by, (unsigned)a->bz,   (unsigned)a->shmem, NULL,
                          attrs,           (unsigned)a->nattr};
    int n;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (a->nattr > 32 || call->msg->data.len != a->nattr * sizeof(CUlaunchAttribute))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(attrs, call->msg->data.data, call->msg->data.len);
    res = s->drv.cuOccupancyMaxActiveClusters(&n, h->real, &cfg);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = (uint64_t)n;
    return res;
}

CUresult srv_op_occ_dsmem(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_OCC_AVAIL_DSMEM *a = SRV_ARGS(call, OCC_AVAIL_DSMEM);
    struct srv_handle *h = srv_func_handle(s, a->func);
    size_t n;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res =
        s->drv.cuOccupancyAvailableDynamicSMemPerBlock(&n, h->real, (int)a->blocks, (int)a->block);
    if (res == CUDA_SUCCESS)
        call->out[call->nout++] = n;
    return res;
}

CUresult srv_op_occ_potential(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_OCC_MAX_POTENTIAL_BLOCK *a = SRV_ARGS(call, OCC_MAX_POTENTIAL_BLOCK);
    struct srv_handle *h = srv_func_handle(s, a->func);
    int grid, block;
    CUresult res;

    if (h == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    res = s->drv.cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, h->real, NULL, a->dsmem,
                                                           (int)a->limit, (unsigned)a->flags);
    if (res == CUDA_SUCCESS) {
        call->out[call->nout++] = (uint64_t)grid;
        call->out[call->nout++] = (uint64_t)block;
    }
    return res;
}
