/* Keeps calling the driver until the server dies under it; passes when the failure comes back
 * as an error (and later calls fail too) within a bounded time, instead of a hang. With
 * "lanes": asynchronous 64 MiB copies of pinned memory both ways (over the data lanes on TCP,
 * which may be moving bytes when the server dies), each round synchronized. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* One round: a copy in (and out), then the context synchronized. */
static CUresult round_trip(CUdeviceptr d, void *in, void *out, size_t n, int lanes)
{
    CUresult r = lanes ? cuMemcpyHtoDAsync(d, in, n, NULL) : cuMemcpyHtoD(d, in, n);

    if (r == CUDA_SUCCESS && lanes)
        r = cuMemcpyDtoHAsync(out, d, n, NULL);
    return r == CUDA_SUCCESS ? cuCtxSynchronize() : r;
}

int main(int argc, char **argv)
{
    static char buf[1 << 20];
    int lanes = argc > 1 && strcmp(argv[1], "lanes") == 0;
    size_t n = lanes ? 64u << 20 : sizeof(buf);
    void *in = buf, *out = NULL;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;
    CUresult r, first;
    double start, failed_at;

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemAlloc(&d, n) != CUDA_SUCCESS ||
        (lanes && (cuMemHostAlloc(&in, n, 0) != CUDA_SUCCESS ||
                   cuMemHostAlloc(&out, n, 0) != CUDA_SUCCESS))) {
        printf("setup failed\n");
        return 1;
    }
    printf("running\n");
    fflush(stdout);
    start = now_s();
    do
        r = round_trip(d, in, out, n, lanes);
    while (r == CUDA_SUCCESS && now_s() - start < 120);
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
