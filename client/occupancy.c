/* Occupancy queries: answered by the server's driver. */
#include "module.h"

static CUresult occ_call(struct cli_call *call, CUfunction func, uint64_t *out, unsigned nout)
{
    struct cli_func *f = cli_func_check(func);
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    call->args[0] = f->h.id;
    call->out = out;
    call->out_cap = nout;
    res = cli_call_sync(call);
    if (res == CUDA_SUCCESS && call->nout < nout)
        res = CUDA_ERROR_UNKNOWN;
    return res;
}

CLI_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *numBlocks, CUfunction func, int blockSize, size_t dsmem, unsigned int flags)
{
    uint64_t out[1];
    struct cli_call call = {.op = PROTO_OP_OCC_MAX_BLOCKS, .nargs = 4,
                            .args = {0, (uint64_t)blockSize, dsmem, flags}};
    CUresult res;

    if (numBlocks == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = occ_call(&call, func, out, 1);
    if (res == CUDA_SUCCESS)
        *numBlocks = (int)out[0];
    return res;
}

CLI_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                                int blockSize, size_t dsmem)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                dsmem, 0);
}

CLI_EXPORT CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                                 const CUlaunchConfig *c)
{
    uint64_t out[1];
    struct cli_call call = {.op = PROTO_OP_OCC_MAX_CLUSTERS, .nargs = 9};
    CUresult res;

    if (numClusters == NULL || c == NULL || c->numAttrs > 32)
        return CUDA_ERROR_INVALID_VALUE;
    call.args[1] = c->gridDimX, call.args[2] = c->gridDimY, call.args[3] = c->gridDimZ;
    call.args[4] = c->blockDimX, call.args[5] = c->blockDimY, call.args[6] = c->blockDimZ;
    call.args[7] = c->sharedMemBytes;
    call.args[8] = c->numAttrs;
    call.data = c->attrs;
    call.data_len = c->numAttrs * sizeof(CUlaunchAttribute);
    res = occ_call(&call, func, out, 1);
    if (res == CUDA_SUCCESS)
        *numClusters = (int)out[0];
    return res;
}

CLI_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dsmem, CUfunction func,
                                                            int numBlocks, int blockSize)
{
    uint64_t out[1];
    struct cli_call call = {.op = PROTO_OP_OCC_AVAIL_DSMEM, .nargs = 3,
                            .args = {0, (uint64_t)numBlocks, (uint64_t)blockSize}};
    CUresult res;

    if (dsmem == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = occ_call(&call, func, out, 1);
    if (res == CUDA_SUCCESS)
        *dsmem = (size_t)out[0];
    return res;
}

/* The variant with a block-size-to-shared-memory callback would need the callback on the
 * server; without one the server answers directly. */
CLI_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(
    int *minGridSize, int *blockSize, CUfunction func, CUoccupancyB2DSize b2d, size_t dsmem,
    int limit, unsigned int flags)
{
    uint64_t out[2];
    struct cli_call call = {.op = PROTO_OP_OCC_MAX_POTENTIAL_BLOCK, .nargs = 4,
                            .args = {0, dsmem, (uint64_t)limit, flags}};
    CUresult res;

    if (b2d != NULL)
        return cli_unsupported("cuOccupancyMaxPotentialBlockSize with a shared-memory callback");
    if (minGridSize == NULL || blockSize == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = occ_call(&call, func, out, 2);
    if (res == CUDA_SUCCESS) {
        *minGridSize = (int)out[0];
        *blockSize = (int)out[1];
    }
    return res;
}

CLI_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize,
                                                     CUfunction func, CUoccupancyB2DSize b2d,
                                                     size_t dsmem, int limit)
{
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, b2d, dsmem,
                                                     limit, 0);
}
