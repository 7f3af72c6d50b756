/* Occupancy queries: answered by the server's driver. The answer of
 * cuOccupancyMaxActiveBlocksPerMultiprocessor(WithFlags) depends only on the function, its
 * attributes and cache configuration, and the arguments, so it is cached here: libraries ask it
 * before many launches (PyTorch's ResNet-50 asked 1443 times in 120 forward passes). Setting a
 * function attribute or a cache configuration (cli_occupancy_forget) empties the cache. */
#include <string.h>

#include "client/api/module.h"

#define OCC_CACHE_SLOTS 1024 /* direct-mapped */

static struct occ_entry {
    uint64_t func, block, dsmem, flags, gen;
    int blocks;
} occ_cache[OCC_CACHE_SLOTS];
static uint64_t occ_gen = 1; /* entries of older generations are empty */
static pthread_mutex_t occ_lock = PTHREAD_MUTEX_INITIALIZER;

void cli_occupancy_forget(void)
{
    pthread_mutex_lock(&occ_lock);
    __atomic_add_fetch(&occ_gen, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&occ_lock);
}

static struct occ_entry *occ_slot(uint64_t func, uint64_t block, uint64_t dsmem, uint64_t flags)
{
    uint64_t h = (func * 0x9E3779B97F4A7C15ull) ^ (block * 0xC2B2AE3D27D4EB4Full) ^
                 (dsmem * 0x165667B19E3779F9ull) ^ flags;

    return &occ_cache[(h >> 17) & (OCC_CACHE_SLOTS - 1)];
}

/* The cached answer for a[0..3]: function id, block size, dynamic shared memory, flags and
 * device (flags | device << 32), if any. */
static bool occ_lookup(const uint64_t *a, int *blocks)
{
    struct occ_entry *e;
    bool hit;

    pthread_mutex_lock(&occ_lock);
    e = occ_slot(a[0], a[1], a[2], a[3]);
    hit = e->gen == __atomic_load_n(&occ_gen, __ATOMIC_RELAXED) && e->func == a[0] &&
          e->block == a[1] && e->dsmem == a[2] && e->flags == a[3];
    if (hit)
        *blocks = e->blocks;
    pthread_mutex_unlock(&occ_lock);
    return hit;
}

static void occ_store(const uint64_t *a, uint64_t gen, int blocks)
{
    struct occ_entry *e;

    pthread_mutex_lock(&occ_lock);
    e = occ_slot(a[0], a[1], a[2], a[3]);
    if (gen == __atomic_load_n(&occ_gen, __ATOMIC_RELAXED)) /* nothing was set meanwhile */
        *e = (struct occ_entry){a[0], a[1], a[2], a[3], gen, blocks};
    pthread_mutex_unlock(&occ_lock);
}

static CUresult occ_send(struct cli_call *call, uint64_t *out, unsigned nout)
{
    CUresult res;

    call->out = out;
    call->out_cap = nout;
    res = cli_call_sync(call);
    if (res == CUDA_SUCCESS && call->nout < nout)
        res = CUDA_ERROR_UNKNOWN;
    return res;
}

/* A context current and func a function or kernel, whose id becomes the call's `func` (the
 * first argument of every OCC_* op). */
static CUresult occ_func(struct cli_call *call, CUfunction func)
{
    struct cli_func *f = cli_func_check(func);
    CUresult res = cli_need_ctx();

    if (res != CUDA_SUCCESS)
        return res;
    if (f == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    call->a.OCC_MAX_BLOCKS.func = f->h.id;
    return CUDA_SUCCESS;
}

static CUresult occ_call(struct cli_call *call, CUfunction func, uint64_t *out, unsigned nout)
{
    CUresult res = occ_func(call, func);

    return res != CUDA_SUCCESS ? res : occ_send(call, out, nout);
}

CLI_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *numBlocks, CUfunction func, int blockSize, size_t dsmem, unsigned int flags)
{
    uint64_t out[1], gen;
    struct cli_call call = {CLI_ARGS(OCC_MAX_BLOCKS, .func = 0, .block = (uint64_t)blockSize,
                                     .dsmem = dsmem, .flags = flags)};
    struct cli_ctx *ctx;
    uint64_t key[4];
    CUresult res;

    if (numBlocks == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = occ_func(&call, func)) != CUDA_SUCCESS)
        return res;
    ctx = cli_ctx_current();
    memcpy(key, call.a.words, sizeof(key));
    key[3] |= (uint64_t)(ctx != NULL ? ctx->device : 0) << 32;
    if (occ_lookup(key, numBlocks))
        return CUDA_SUCCESS;
    gen = __atomic_load_n(&occ_gen, __ATOMIC_ACQUIRE);
    res = occ_send(&call, out, 1);
    if (res == CUDA_SUCCESS) {
        *numBlocks = (int)out[0];
        occ_store(key, gen, *numBlocks);
    }
    return res;
}

CLI_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                                int blockSize, size_t dsmem)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dsmem,
                                                                0);
}

CLI_EXPORT CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                                 const CUlaunchConfig *c)
{
    uint64_t out[1];
    struct cli_call call = {CLI_ARGS(OCC_MAX_CLUSTERS)};
    CUresult res;

    if (numClusters == NULL || c == NULL || c->numAttrs > 32)
        return CUDA_ERROR_INVALID_VALUE;
    call.a.OCC_MAX_CLUSTERS.gx = c->gridDimX, call.a.OCC_MAX_CLUSTERS.gy = c->gridDimY,
    call.a.OCC_MAX_CLUSTERS.gz = c->gridDimZ;
    call.a.OCC_MAX_CLUSTERS.bx = c->blockDimX, call.a.OCC_MAX_CLUSTERS.by = c->blockDimY,
    call.a.OCC_MAX_CLUSTERS.bz = c->blockDimZ;
    call.a.OCC_MAX_CLUSTERS.shmem = c->sharedMemBytes;
    call.a.OCC_MAX_CLUSTERS.nattr = c->numAttrs;
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
    struct cli_call call = {CLI_ARGS(OCC_AVAIL_DSMEM, .func = 0, .blocks = (uint64_t)numBlocks,
                                     .block = (uint64_t)blockSize)};
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
CLI_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize,
                                                              CUfunction func,
                                                              CUoccupancyB2DSize b2d, size_t dsmem,
                                                              int limit, unsigned int flags)
{
    uint64_t out[2];
    struct cli_call call = {CLI_ARGS(OCC_MAX_POTENTIAL_BLOCK, .func = 0, .dsmem = dsmem,
                                     .limit = (uint64_t)limit, .flags = flags)};
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
