/* TENSOR_MAP_ENCODE's arrays (proto/ops.def): the driver's cuTensorMapEncode* arguments that are
 * arrays, each sized for the largest rank (5); entries past the rank are zero. */
#ifndef RGPU_PROTO_TENSOR_MAP_H
#define RGPU_PROTO_TENSOR_MAP_H

#include <stdint.h>

#define PROTO_TENSOR_MAP_RANK_MAX 5
#define PROTO_TENSOR_MAP_SIZE     128 /* sizeof(CUtensorMap) */

enum proto_tensor_map_kind {
    PROTO_TENSOR_MAP_TILED,
    PROTO_TENSOR_MAP_IM2COL,
    PROTO_TENSOR_MAP_IM2COL_WIDE,
};

struct proto_tensor_map_arrays {
    uint64_t global_dim[PROTO_TENSOR_MAP_RANK_MAX];
    uint64_t global_strides[PROTO_TENSOR_MAP_RANK_MAX - 1];
    uint32_t box_dim[PROTO_TENSOR_MAP_RANK_MAX];      /* tiled */
    int32_t box_lower[PROTO_TENSOR_MAP_RANK_MAX - 2]; /* im2col: pixelBoxLowerCorner */
    int32_t box_upper[PROTO_TENSOR_MAP_RANK_MAX - 2]; /* im2col: pixelBoxUpperCorner */
    uint32_t element_strides[PROTO_TENSOR_MAP_RANK_MAX];
};

#endif
