/* Tensor maps through rgpu (fake driver): cuTensorMapEncodeTiled, Im2col, Im2colWide and
 * ReplaceAddress are encoded by the worker's driver and the 128 bytes come back. The fake
 * driver writes its arguments into the map (tests/fakecuda/fakecuda.c, "Tensor maps"), so each
 * argument is checked to have arrived; a misaligned address is refused by the driver. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

static const uint64_t *words(const CUtensorMap *m)
{
    return (const uint64_t *)m;
}

static void tiled(CUdeviceptr d)
{
    CUtensorMap m;
    cuuint64_t dim[3] = {64, 32, 4}, strides[2] = {256, 8192};
    cuuint32_t box[3] = {16, 8, 1}, es[3] = {1, 1, 1};
    const uint64_t *w = words(&m);

    OK(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)d, dim, strides, box,
                              es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA));
    EXPECT(w[0] == d, "tiled: address %#llx", (unsigned long long)w[0]);
    EXPECT(w[1] == (1 | (uint64_t)CU_TENSOR_MAP_DATA_TYPE_FLOAT32 << 8 | 3ull << 16 |
                    (uint64_t)CU_TENSOR_MAP_SWIZZLE_128B << 24 |
                    (uint64_t)CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA << 32),
           "tiled: kind/dtype/rank/swizzle/oob %#llx", (unsigned long long)w[1]);
    EXPECT(w[2] == 64 && w[3] == 32 && w[4] == 4 && w[7] == 256 && w[8] == 8192,
           "tiled: dims and strides");
    EXPECT(w[11] == (16 | 8ull << 32) && w[12] == 1, "tiled: box and element strides");
    /* the same encoding again (XLA's per-execution maps): the same bytes, from the client's
     * memo (run_programs.sh counts the round trips) */
    CUtensorMap first = m, again;
    OK(cuTensorMapEncodeTiled(&again, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)d, dim, strides,
                              box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA));
    EXPECT(memcmp(&again, &first, sizeof(first)) == 0, "tiled: the same map encoded again");
    box[0] = 32; /* one argument changed: encoded anew */
    OK(cuTensorMapEncodeTiled(&again, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)d, dim, strides,
                              box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA));
    EXPECT(words(&again)[11] == (32 | 8ull << 32), "tiled: another box, another map");
    box[0] = 16;
    OK(cuTensorMapReplaceAddress(&m, (void *)(d + 4096)));
    EXPECT(w[0] == d + 4096 && w[2] == 64, "replace address: %#llx", (unsigned long long)w[0]);
    EXPECT_RESULT(cuTensorMapReplaceAddress(&m, (void *)(d + 8)), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(cuTensorMapEncodeTiled(
                      &m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)(d + 4), dim, strides, box,
                      es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                      CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                  CUDA_ERROR_INVALID_VALUE);
    EXPECT_RESULT(
        cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 6, (void *)d, dim, strides, box,
                               es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                               CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        CUDA_ERROR_INVALID_VALUE);
}

static void im2col(CUdeviceptr d)
{
    CUtensorMap m;
    cuuint64_t dim[4] = {8, 10, 10, 2}, strides[3] = {16, 160, 1600};
    cuuint32_t es[4] = {1, 1, 1, 1};
    int lo[2] = {-1, -1}, up[2] = {1, 1};
    const uint64_t *w = words(&m);

    OK(cuTensorMapEncodeIm2col(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)d, dim, strides, lo,
                               up, 8, 32, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                               CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    EXPECT((w[1] & 0xffffff) == (2 | (uint64_t)CU_TENSOR_MAP_DATA_TYPE_FLOAT16 << 8 | 4ull << 16),
           "im2col: kind/dtype/rank %#llx", (unsigned long long)w[1]);
    EXPECT(w[5] == 2 && w[9] == 1600 && w[11] == (8 | 32ull << 32) &&
               w[12] == (1 | (uint64_t)(uint32_t)-1 << 32) && w[13] == 1,
           "im2col: dims, channels/pixels, corners");
    OK(cuTensorMapEncodeIm2colWide(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, (void *)d, dim, strides,
                                   -2, 3, 8, 64, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    EXPECT((w[1] & 0xff) == 3 && w[11] == (8 | 64ull << 32) &&
               w[12] == (1 | (uint64_t)(uint32_t)-2 << 32) && w[13] == 3 &&
               w[14] == CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128,
           "im2col wide: channels/pixels, corners, mode");
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;

    NEED(cuInit(0));
    NEED(cuDeviceGet(&dev, 0));
    NEED(cuCtxCreate(&ctx, NULL, 0, dev));
    NEED(cuMemAlloc(&d, 1 << 20));
    tiled(d);
    im2col(d);
    OK(cuMemFree(d));
    OK(cuCtxDestroy(ctx));
    printf("%s\n", failures ? "tensor_maps: FAILED" : "tensor_maps: PASS");
    return failures != 0;
}
