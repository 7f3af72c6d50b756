/* Tensor maps: the worker's driver encodes the CUtensorMap (proto/tensor_map.h); the global
 * address is a device pointer of this worker, used as it comes. */
#include <string.h>

#include "proto/tensor_map.h"
#include "server/session.h"

#define ARG(i) (call->msg->args[i])

/* [kind, dtype, rank, addr, interleave, swizzle, l2, oob, channels, pixels, lower w, upper w,
 *  mode] data: struct proto_tensor_map_arrays -> data: CUtensorMap */
static CUresult h_encode(struct srv_session *s, struct srv_call *call)
{
    static CUtensorMap map;
    struct proto_tensor_map_arrays a;
    unsigned rank = (unsigned)ARG(2);
    void *addr = (void *)(uintptr_t)ARG(3);
    CUresult res = CUDA_ERROR_INVALID_VALUE;

    if (call->msg->data.len != sizeof(a) || rank == 0 || rank > PROTO_TENSOR_MAP_RANK_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&a, call->msg->data.data, sizeof(a));
    memset(&map, 0, sizeof(map));
    switch (ARG(0)) {
    case PROTO_TENSOR_MAP_TILED:
        res = s->drv.cuTensorMapEncodeTiled(&map, ARG(1), rank, addr, a.global_dim,
                                            a.global_strides, a.box_dim, a.element_strides,
                                            ARG(4), ARG(5), ARG(6), ARG(7));
        break;
    case PROTO_TENSOR_MAP_IM2COL:
        res = s->drv.cuTensorMapEncodeIm2col(&map, ARG(1), rank, addr, a.global_dim,
                                             a.global_strides, a.box_lower, a.box_upper,
                                             ARG(8), ARG(9), a.element_strides, ARG(4), ARG(5),
                                             ARG(6), ARG(7));
        break;
    case PROTO_TENSOR_MAP_IM2COL_WIDE:
        res = s->drv.cuTensorMapEncodeIm2colWide(
            &map, ARG(1), rank, addr, a.global_dim, a.global_strides, (int)(int64_t)ARG(10),
            (int)(int64_t)ARG(11), ARG(8), ARG(9), a.element_strides, ARG(4), ARG(12), ARG(5),
            ARG(6), ARG(7));
        break;
    }
    if (res == CUDA_SUCCESS) {
        call->rdata = &map;
        call->rdata_len = sizeof(map);
    }
    return res;
}

/* [addr] data: CUtensorMap -> data: CUtensorMap */
static CUresult h_replace_address(struct srv_session *s, struct srv_call *call)
{
    static CUtensorMap map;
    CUresult res;

    if (call->msg->data.len != sizeof(map))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&map, call->msg->data.data, sizeof(map));
    res = s->drv.cuTensorMapReplaceAddress(&map, (void *)(uintptr_t)ARG(0));
    if (res == CUDA_SUCCESS) {
        call->rdata = &map;
        call->rdata_len = sizeof(map);
    }
    return res;
}

const srv_handler_fn srv_tensor_map_handlers[PROTO_OP_COUNT] = {
    [PROTO_OP_TENSOR_MAP_ENCODE] = h_encode,
    [PROTO_OP_TENSOR_MAP_REPLACE_ADDRESS] = h_replace_address,
};
