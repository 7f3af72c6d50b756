/* Pitched copies through the client: host rows with a pitch wider than the copy, device
 * memory from cuMemAllocPitch, every direction, synchronous and asynchronous, and a one-slice
 * cuMemcpy3D. Prints PASS when every byte landed where CUDA puts it. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

#define W  100 /* bytes copied per row */
#define H  37  /* rows */
#define HP 128 /* host pitch */

static unsigned char src[H][HP], dst[H + 2][HP + 8];

int main(void)
{
    CUcontext ctx;
    CUdevice dev;
    CUstream st;
    CUdeviceptr a, b;
    size_t pa, pb;

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&st, 0) != CUDA_SUCCESS) {
        printf("FAIL: no context\n");
        return 1;
    }
    for (int r = 0; r < H; r++)
        for (int c = 0; c < HP; c++)
            src[r][c] = (unsigned char)(r * 131 + c * 7);
    OK(cuMemAllocPitch(&a, &pa, W, H, 4));
    OK(cuMemAllocPitch(&b, &pb, W + 64, H, 4));
    CUDA_MEMCPY2D up = {.srcMemoryType = CU_MEMORYTYPE_HOST,
                        .srcHost = src,
                        .srcPitch = HP,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                        .dstDevice = a,
                        .dstPitch = pa,
                        .WidthInBytes = W,
                        .Height = H};
    OK(cuMemcpy2D(&up));
    CUDA_MEMCPY2D across = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                            .srcDevice = a,
                            .srcPitch = pa,
                            .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                            .dstDevice = b,
                            .dstXInBytes = 16,
                            .dstPitch = pb,
                            .WidthInBytes = W,
                            .Height = H};
    OK(cuMemcpy2DAsync(&across, st));
    CUDA_MEMCPY2D down = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                          .srcDevice = b,
                          .srcXInBytes = 16,
                          .srcPitch = pb,
                          .dstMemoryType = CU_MEMORYTYPE_HOST,
                          .dstHost = dst,
                          .dstXInBytes = 3,
                          .dstY = 1,
                          .dstPitch = HP + 8,
                          .WidthInBytes = W,
                          .Height = H};
    OK(cuMemcpy2DAsync(&down, st));
    OK(cuStreamSynchronize(st));
    for (int r = 0; r < H; r++)
        if (memcmp(&dst[r + 1][3], src[r], W) != 0) {
            printf("FAIL: row %d differs after HtoD, DtoD and DtoH 2D copies\n", r);
            failures++;
            break;
        }
    memset(dst, 0, sizeof(dst));
    CUDA_MEMCPY3D slice = {.srcMemoryType = CU_MEMORYTYPE_DEVICE,
                           .srcDevice = a,
                           .srcPitch = pa,
                           .dstMemoryType = CU_MEMORYTYPE_HOST,
                           .dstHost = dst,
                           .dstPitch = HP + 8,
                           .WidthInBytes = W,
                           .Height = H,
                           .Depth = 1};
    OK(cuMemcpy3D(&slice));
    for (int r = 0; r < H; r++)
        if (memcmp(dst[r], src[r], W) != 0 || dst[r][W] != 0) {
            printf("FAIL: row %d differs after a one-slice 3D copy\n", r);
            failures++;
            break;
        }
    OK(cuMemFree(a));
    OK(cuMemFree(b));
    OK(cuStreamDestroy(st));
    if (failures == 0)
        printf("PASS\n");
    return failures != 0;
}
