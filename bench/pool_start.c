/* rgpu-bench-pool-start: one job's start through rgpu (bench/pool_scale.sh): the time of
 * cuInit (the pool's probe, placement and the session's handshake) and to the end of the first
 * call that needs the GPU (a context and a 1 MiB allocation), in ms, on one line:
 *   cuinit_ms=12.3 first_call_ms=14.0 */
#include <cuda.h>
#include <stdio.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;
    double t0 = now_ms(), t1, t2;

    if (cuInit(0) != CUDA_SUCCESS) {
        printf("cuInit failed\n");
        return 1;
    }
    t1 = now_ms();
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemAlloc(&d, 1 << 20) != CUDA_SUCCESS) {
        printf("first call failed\n");
        return 1;
    }
    t2 = now_ms();
    printf("cuinit_ms=%.2f first_call_ms=%.2f\n", t1 - t0, t2 - t0);
    cuMemFree(d);
    return 0;
}
