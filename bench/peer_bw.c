/* Cross-device copy bandwidth through whatever libcuda.so.1 comes first (tests/gpu/multigpu.sh
 * runs it through rgpu with two servers, so every copy crosses servers): cuMemcpyPeer from
 * device 0 to 1 and back, and HtoD / DtoH of device 1 for the same sizes (the transport one hop
 * carries), best of REPS. One JSON line per measurement, like bench/micro.c.
 *   rgpu-bench-peer [MiB...]   (default 1 16 256) */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define REPS 5

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "%s failed: %d\n", #call, (int)r_);                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

enum what { PEER_01, PEER_10, HTOD_1, DTOH_1 };
static const char *const names[] = {"peer_0_to_1", "peer_1_to_0", "htod_dev1", "dtoh_dev1"};

static void one(enum what w, size_t n, CUcontext c[2], CUdeviceptr d[2], void *host)
{
    double best = 1e30;

    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        switch (w) {
        case PEER_01:
            CHECK(cuMemcpyPeer(d[1], c[1], d[0], c[0], n));
            break;
        case PEER_10:
            CHECK(cuMemcpyPeer(d[0], c[0], d[1], c[1], n));
            break;
        case HTOD_1:
            CHECK(cuMemcpyHtoD(d[1], host, n));
            break;
        case DTOH_1:
            CHECK(cuMemcpyDtoH(host, d[1], n));
            break;
        }
        CHECK(cuCtxSynchronize());
        if (now_s() - t0 < best)
            best = now_s() - t0;
    }
    printf("{\"bench\": \"%s\", \"bytes\": %zu, \"seconds\": %.6f, \"GBps\": %.3f}\n", names[w], n,
           best, (double)n / best / 1e9);
}

int main(int argc, char **argv)
{
    static const int defaults[] = {1, 16, 256};
    int count = 0;
    CUcontext c[2];
    CUdeviceptr d[2];

    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&count));
    if (count < 2) {
        fprintf(stderr, "rgpu-bench-peer: %d device(s); two are needed\n", count);
        return 2;
    }
    for (int i = 0; i < (argc > 1 ? argc - 1 : 3); i++) {
        size_t n = (size_t)(argc > 1 ? atoi(argv[i + 1]) : defaults[i]) << 20;
        void *host;
        for (int k = 0; k < 2; k++) {
            CHECK(cuDevicePrimaryCtxRetain(&c[k], k));
            CHECK(cuCtxSetCurrent(c[k]));
            CHECK(cuMemAlloc(&d[k], n));
        }
        CHECK(cuMemAllocHost(&host, n));
        for (enum what w = PEER_01; w <= DTOH_1; w++)
            one(w, n, c, d, host);
        CHECK(cuMemFreeHost(host));
        for (int k = 0; k < 2; k++) {
            CHECK(cuCtxSetCurrent(c[k]));
            CHECK(cuMemFree(d[k]));
        }
    }
    return 0;
}
