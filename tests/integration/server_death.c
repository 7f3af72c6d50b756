/* Keeps calling the driver until the server dies under it; passes when the failure comes back
 * as an error (and later calls fail too) within a bounded time, instead of a hang. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *name(CUresult r)
{
    const char *n = "?";

    cuGetErrorName(r, &n);
    return n;
}

int main(void)
{
    static char buf[1 << 20];
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;
    CUresult r, first;
    double start, failed_at;

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
        cuMemAlloc(&d, sizeof(buf)) != CUDA_SUCCESS) {
        printf("setup failed\n");
        return 1;
    }
    printf("running\n");
    fflush(stdout);
    start = now_s();
    do {
        r = cuMemcpyHtoD(d, buf, sizeof(buf));
        if (r == CUDA_SUCCESS)
            r = cuCtxSynchronize();
    } while (r == CUDA_SUCCESS && now_s() - start < 120);
    failed_at = now_s();
    if (r == CUDA_SUCCESS) {
        printf("no error after 120 s\n");
        return 1;
    }
    first = r;
    r = cuMemAlloc(&d, 16);
    printf("first error %s; a later call returned %s after %.3f s\n", name(first), name(r),
           now_s() - failed_at);
    return r == CUDA_SUCCESS;
}
