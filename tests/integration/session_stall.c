/* The session's keepalive (issue 27 item 8), from the client's side:
 *   session_stall long   one cuCtxSynchronize that the server's (fake) driver makes last longer
 *                        than the client's session timeout (FAKECUDA_SYNC_SLEEP_MS on the
 *                        server): it must succeed, the worker's keepalives telling the client
 *                        the session still answers; PASS.
 *   session_stall stop   cuCtxSynchronize in a loop, printing "running" first; the test stops
 *                        the worker (SIGSTOP): the call waiting then must fail with
 *                        CUDA_ERROR_DEVICE_UNAVAILABLE within the session timeout (the test
 *                        bounds the wait), and a later call too; PASS. */
#include <cuda.h>
#include <stdio.h>
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

int main(int argc, char **argv)
{
    int stop = argc > 1 && strcmp(argv[1], "stop") == 0;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;
    CUresult r;
    double t0;

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        printf("setup failed\n");
        return 1;
    }
    if (!stop) {
        t0 = now_s();
        r = cuCtxSynchronize();
        printf("cuCtxSynchronize returned %s after %.1f s\n", name(r), now_s() - t0);
        if (r == CUDA_SUCCESS && cuMemAlloc(&d, 16) == CUDA_SUCCESS)
            printf("PASS\n");
        return r != CUDA_SUCCESS;
    }
    printf("running\n");
    fflush(stdout);
    t0 = now_s();
    do
        r = cuCtxSynchronize();
    while (r == CUDA_SUCCESS && now_s() - t0 < 300);
    printf("first error %s after %.1f s of calls\n", name(r), now_s() - t0);
    t0 = now_s();
    CUresult later = cuMemAlloc(&d, 16);
    printf("a later call: %s after %.3f s\n", name(later), now_s() - t0);
    if (r == CUDA_ERROR_DEVICE_UNAVAILABLE && later == CUDA_ERROR_DEVICE_UNAVAILABLE)
        printf("PASS\n");
    return 0;
}
