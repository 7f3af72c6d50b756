/* The fake driver's pitched copies: host and device memory are both host memory here, so a
 * 2D copy is a loop of row copies, with device rows checked against live fake allocations. */
#include <stdint.h>
#include <string.h>

#include "fakecuda.h"

static uint8_t *row_base(CUmemorytype t, CUdeviceptr dev, const void *host, size_t x, size_t y,
                         size_t pitch)
{
    uintptr_t base = t == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)dev;
    return (uint8_t *)(base + x + y * pitch);
}

CUresult cuMemcpy2D(const CUDA_MEMCPY2D *c)
{
    uint8_t *s, *d;

    if (!c ||
        (c->srcMemoryType != CU_MEMORYTYPE_HOST && c->srcMemoryType != CU_MEMORYTYPE_DEVICE) ||
        (c->dstMemoryType != CU_MEMORYTYPE_HOST && c->dstMemoryType != CU_MEMORYTYPE_DEVICE))
        return CUDA_ERROR_INVALID_VALUE;
    if (c->WidthInBytes > c->srcPitch || c->WidthInBytes > c->dstPitch)
        return CUDA_ERROR_INVALID_VALUE;
    s = row_base(c->srcMemoryType, c->srcDevice, c->srcHost, c->srcXInBytes, c->srcY, c->srcPitch);
    d = row_base(c->dstMemoryType, c->dstDevice, c->dstHost, c->dstXInBytes, c->dstY, c->dstPitch);
    for (size_t r = 0; r < c->Height; r++) {
        if ((c->srcMemoryType == CU_MEMORYTYPE_DEVICE &&
             !fk_valid(s + r * c->srcPitch, c->WidthInBytes)) ||
            (c->dstMemoryType == CU_MEMORYTYPE_DEVICE &&
             !fk_valid(d + r * c->dstPitch, c->WidthInBytes)))
            return CUDA_ERROR_INVALID_VALUE;
        memmove(d + r * c->dstPitch, s + r * c->srcPitch, c->WidthInBytes);
    }
    return CUDA_SUCCESS;
}

CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D *c, CUstream s)
{
    return cuMemcpy2D(c);
}
