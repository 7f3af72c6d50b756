/* A saturating client for the compute gate on the fake driver: launches the fake's matmul
 * kernel (128x128, a couple of ms of CPU per launch) back to back for argv[1] seconds,
 * synchronizing every 4 launches, and prints "launches=N". Through the real client library.
 * With argv[2] = US, it launches the fake's sleep_us kernel instead (US microseconds of
 * "GPU" time each, whatever the host's load); argv[1] = 0 then runs until killed.
 * With argv[3] = THINK_US as well, it is a CPU-bound request loop instead (tests/worker/
 * share_light.sh): one sleep_us kernel, a synchronize (the answer read back), then THINK_US of
 * host time (slept), and it prints "requests=N". With argv[4] = BURST as well, each request
 * launches BURST sleep_us kernels back to back (asynchronously) before its synchronize (tests/
 * worker/share_bursts.sh). SHARE_LOAD_DEVICE=I: on device I (default 0). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 128
#define CHECK(x)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = "?";                                                                  \
            cuGetErrorName(r_, &n_);                                                               \
            printf("%s failed: %s\n", #x, n_);                                                     \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry _Z6matmulPKfS0_Pfi()\n{\n ret;\n}\n"
                          ".visible .entry _Z8sleep_usj()\n{\n ret;\n}\n";

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 3, t0;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUdeviceptr a, b, c;
    int n = N;
    unsigned us = argc > 2 ? (unsigned)atoi(argv[2]) : 0;
    long think_us = argc > 3 ? atol(argv[3]) : -1;
    int burst = argc > 4 ? atoi(argv[4]) : 1;
    long launches = 0;
    void *params[] = {&a, &b, &c, &n}, *sleep_params[] = {&us};

    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, getenv("SHARE_LOAD_DEVICE") ? atoi(getenv("SHARE_LOAD_DEVICE")) : 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, ptx));
    CHECK(cuModuleGetFunction(&f, mod, us ? "_Z8sleep_usj" : "_Z6matmulPKfS0_Pfi"));
    CHECK(cuMemAlloc(&a, N * N * 4));
    CHECK(cuMemAlloc(&b, N * N * 4));
    CHECK(cuMemAlloc(&c, N * N * 4));
    printf("ready\n");
    fflush(stdout);
    if (think_us >= 0) {
        struct timespec think = {think_us / 1000000, think_us % 1000000 * 1000};
        long requests = 0;
        for (t0 = now_s(); secs == 0 || now_s() - t0 < secs; requests++) {
            for (int i = 0; i < burst; i++)
                CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, sleep_params, NULL));
            CHECK(cuCtxSynchronize());
            nanosleep(&think, NULL);
        }
        printf("requests=%ld\n", requests);
        return 0;
    }
    for (t0 = now_s(); secs == 0 || now_s() - t0 < secs;) {
        for (int i = 0; i < 4; i++)
            CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, us ? sleep_params : params, NULL));
        CHECK(cuCtxSynchronize());
        launches += 4;
    }
    printf("launches=%ld\n", launches);
    return 0;
}
