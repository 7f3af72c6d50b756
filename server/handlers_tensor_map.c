/* Tensor maps: the worker's driver encodes the CUtensorMap (proto/tensor_map.h); the global
 * address is a device pointer of this worker, used as it comes. */
#include <string.h>

#include "proto/tensor_map.h"
#include "server/session.h"

/* The map as the call's reply data, in session scratch (valid until the next call; the map
 * itself is made on the stack, where its 64-byte alignment holds). */
static CUresult reply_map(struct srv_session *s, struct srv_call *call, const CUtensorMap *map)
{
    void *out = srv_scratch(s, sizeof(*map));

    if (out == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(out, map, sizeof(*map));
    call->rdata = out;
    call->rdata_len = sizeof(*map);
    return CUDA_SUCCESS;
}

/* The arrays come as data: struct proto_tensor_map_arrays; the map goes back as data. */
CUresult srv_op_tensor_map_encode(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_TENSOR_MAP_ENCODE *g = SRV_ARGS(call, TENSOR_MAP_ENCODE);
    CUtensorMap map;
    struct proto_tensor_map_arrays a;
    unsigned rank = (unsigned)g->rank;
    void *addr = (void *)(uintptr_t)g->addr;
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    if (call->msg->data.len != sizeof(a) || rank == 0 || rank > PROTO_TENSOR_MAP_RANK_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&a, call->msg->data.data, sizeof(a));
    memset(&map, 0, sizeof(map));
    switch (g->kind) {
    case PROTO_TENSOR_MAP_TILED:
        res = s->drv.cuTensorMapEncodeTiled(&map, g->dtype, rank, addr, a.global_dim,
                                            a.global_strides, a.box_dim, a.element_strides,
                                            g->interleave, g->swizzle, g->l2, g->oob);
        break;
    case PROTO_TENSOR_MAP_IM2COL:
        res = s->drv.cuTensorMapEncodeIm2col(
            &map, g->dtype, rank, addr, a.global_dim, a.global_strides, a.box_lower, a.box_upper,
            g->channels, g->pixels, a.element_strides, g->interleave, g->swizzle, g->l2, g->oob);
        break;
    case PROTO_TENSOR_MAP_IM2COL_WIDE:
        res = s->drv.cuTensorMapEncodeIm2colWide(
            &map, g->dtype, rank, addr, a.global_dim, a.global_strides, (int)(int64_t)g->lower_w,
            (int)(int64_t)g->upper_w, g->channels, g->pixels, a.element_strides, g->interleave,
            g->mode, g->swizzle, g->l2, g->oob);
        break;
    }
    return res == CUDA_SUCCESS ? reply_map(s, call, &map) : res;
}

/* data: CUtensorMap -> data: the CUtensorMap with its new global address */
CUresult srv_op_tensor_map_replace_address(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_TENSOR_MAP_REPLACE_ADDRESS *a =
        SRV_ARGS(call, TENSOR_MAP_REPLACE_ADDRESS);
    CUtensorMap map;
    CUresult res;

    if (call->msg->data.len != sizeof(map))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&map, call->msg->data.data, sizeof(map));
    res = s->drv.cuTensorMapReplaceAddress(&map, (void *)(uintptr_t)a->addr);
    return res == CUDA_SUCCESS ? reply_map(s, call, &map) : res;
}
