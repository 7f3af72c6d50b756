/* Tensor maps (cuTensorMapEncode*, cuTensorMapReplaceAddress): the worker's driver encodes the
 * 128-byte CUtensorMap and it comes back. The global address is a device pointer of the
 * server, which is what the client's device pointers are, so it travels unchanged.
 *
 * Encoding is a pure function of its arguments on the host (natively no GPU work, a few
 * microseconds), and XLA encodes the same maps again for every execution of a Triton GEMM:
 * successful encodings are remembered per context, so a repeated one costs no round trip. */
#include <pthread.h>
#include <string.h>

#include "client/api/api.h"
#include "proto/tensor_map.h"

/* What an encoding depends on: the context (its server's driver and device), the arguments,
 * the arrays. */
struct map_key {
    uint64_t ctx; /* its id: never reused, unlike its address */
    struct proto_args_TENSOR_MAP_ENCODE args;
    struct proto_tensor_map_arrays arrays;
};

#define MEMO_SLOTS 256 /* direct-mapped by hash; a collision replaces */
static struct {
    bool used;
    struct map_key key;
    CUtensorMap map;
} memo[MEMO_SLOTS];
static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned key_slot(const struct map_key *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */

    for (size_t i = 0; i < sizeof(*k); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return (unsigned)(h % MEMO_SLOTS);
}

static bool memo_find(const struct map_key *k, CUtensorMap *map)
{
    unsigned i = key_slot(k);
    bool hit;

    pthread_mutex_lock(&memo_lock);
    hit = memo[i].used && memcmp(&memo[i].key, k, sizeof(*k)) == 0;
    if (hit)
        *map = memo[i].map;
    pthread_mutex_unlock(&memo_lock);
    return hit;
}

static void memo_put(const struct map_key *k, const CUtensorMap *map)
{
    unsigned i = key_slot(k);

    pthread_mutex_lock(&memo_lock);
    memo[i].used = true;
    memo[i].key = *k;
    memo[i].map = *map;
    pthread_mutex_unlock(&memo_lock);
}

/* Sends TENSOR_MAP_ENCODE (its arguments already in call) with the arrays; the map comes back,
 * or from the memo when this context encoded the same before. */
static CUresult encode(struct cli_call *call, CUtensorMap *map,
                       const struct proto_tensor_map_arrays *a)
{
    struct map_key key;
    CUresult res;
    struct cli_ctx *ctx = cli_ctx_current();

    memset(&key, 0, sizeof(key)); /* padding too: keys are compared as bytes */
    key.ctx = ctx != NULL ? ctx->h.id : 0;
    key.args = call->a.TENSOR_MAP_ENCODE;
    key.arrays = *a;
    if (key.ctx != 0 && memo_find(&key, map))
        return CUDA_SUCCESS;
    call->data = a;
    call->data_len = sizeof(*a);
    call->rdata = map;
    call->rdata_cap = sizeof(*map);
    res = cli_call_sync(call);
    if (res == CUDA_SUCCESS && call->rdata_len != sizeof(*map))
        res = CUDA_ERROR_UNKNOWN;
    if (res == CUDA_SUCCESS && key.ctx != 0)
        memo_put(&key, map);
    return res;
}

/* The checks the driver makes before it looks at values, and the arrays every kind has. */
static CUresult common_arrays(CUtensorMap *map, unsigned rank, const cuuint64_t *dim,
                              const cuuint64_t *strides, const cuuint32_t *estrides,
                              unsigned min_rank, struct proto_tensor_map_arrays *a)
{
    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (map == NULL || rank < min_rank || rank > PROTO_TENSOR_MAP_RANK_MAX || dim == NULL ||
        (rank > 1 && strides == NULL) || estrides == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(a, 0, sizeof(*a));
    memcpy(a->global_dim, dim, rank * sizeof(*dim));
    if (rank > 1)
        memcpy(a->global_strides, strides, (rank - 1) * sizeof(*strides));
    memcpy(a->element_strides, estrides, rank * sizeof(*estrides));
    return CUDA_SUCCESS;
}

/* TENSOR_MAP_ENCODE's arguments: those every kind has, then im2col's (channels, pixels,
 * lower_w, upper_w, mode: 0 where a kind has none). */
CLI_EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType dtype,
                                           cuuint32_t rank, void *addr, const cuuint64_t *dim,
                                           const cuuint64_t *strides, const cuuint32_t *box,
                                           const cuuint32_t *estrides, CUtensorMapInterleave il,
                                           CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                                           CUtensorMapFloatOOBfill oob)
{
    struct cli_call call = {
        CLI_ARGS(TENSOR_MAP_ENCODE, .kind = PROTO_TENSOR_MAP_TILED, .dtype = dtype, .rank = rank,
                 .addr = (uint64_t)(uintptr_t)addr, .interleave = il, .swizzle = sw, .l2 = l2,
                 .oob = oob, .channels = 0, .pixels = 0, .lower_w = 0, .upper_w = 0, .mode = 0)};
    struct proto_tensor_map_arrays a;
    CUresult res = common_arrays(map, rank, dim, strides, estrides, 1, &a);

    if (res != CUDA_SUCCESS)
        return res;
    if (box == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(a.box_dim, box, rank * sizeof(*box));
    return encode(&call, map, &a);
}

CLI_EXPORT CUresult cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType dtype,
                                            cuuint32_t rank, void *addr, const cuuint64_t *dim,
                                            const cuuint64_t *strides, const int *lower,
                                            const int *upper, cuuint32_t channels,
                                            cuuint32_t pixels, const cuuint32_t *estrides,
                                            CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                            CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    struct cli_call call = {CLI_ARGS(
        TENSOR_MAP_ENCODE, .kind = PROTO_TENSOR_MAP_IM2COL, .dtype = dtype, .rank = rank,
        .addr = (uint64_t)(uintptr_t)addr, .interleave = il, .swizzle = sw, .l2 = l2, .oob = oob,
        .channels = channels, .pixels = pixels, .lower_w = 0, .upper_w = 0, .mode = 0)};
    struct proto_tensor_map_arrays a;
    CUresult res = common_arrays(map, rank, dim, strides, estrides, 3, &a);

    if (res != CUDA_SUCCESS)
        return res;
    if (lower == NULL || upper == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(a.box_lower, lower, (rank - 2) * sizeof(*lower));
    memcpy(a.box_upper, upper, (rank - 2) * sizeof(*upper));
    return encode(&call, map, &a);
}

CLI_EXPORT CUresult cuTensorMapEncodeIm2colWide(
    CUtensorMap *map, CUtensorMapDataType dtype, cuuint32_t rank, void *addr, const cuuint64_t *dim,
    const cuuint64_t *strides, int lower_w, int upper_w, cuuint32_t channels, cuuint32_t pixels,
    const cuuint32_t *estrides, CUtensorMapInterleave il, CUtensorMapIm2ColWideMode mode,
    CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
    struct cli_call call = {CLI_ARGS(
        TENSOR_MAP_ENCODE, .kind = PROTO_TENSOR_MAP_IM2COL_WIDE, .dtype = dtype, .rank = rank,
        .addr = (uint64_t)(uintptr_t)addr, .interleave = il, .swizzle = sw, .l2 = l2, .oob = oob,
        .channels = channels, .pixels = pixels, .lower_w = (uint64_t)(int64_t)lower_w,
        .upper_w = (uint64_t)(int64_t)upper_w, .mode = (uint64_t)mode)};
    struct proto_tensor_map_arrays a;
    CUresult res = common_arrays(map, rank, dim, strides, estrides, 3, &a);

    if (res != CUDA_SUCCESS)
        return res;
    return encode(&call, map, &a);
}

CLI_EXPORT CUresult cuTensorMapReplaceAddress(CUtensorMap *map, void *addr)
{
    struct cli_call call = {CLI_ARGS(TENSOR_MAP_REPLACE_ADDRESS, .addr = (uintptr_t)addr),
                            .data = map, .data_len = sizeof(*map), .rdata = map,
                            .rdata_cap = sizeof(*map)};
    CUresult res;

    if (!cli_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (map == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    res = cli_call_sync(&call);
    if (res == CUDA_SUCCESS && call.rdata_len != sizeof(*map))
        res = CUDA_ERROR_UNKNOWN;
    return res;
}
