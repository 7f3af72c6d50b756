/* Driver-level microbenchmarks, run natively and through rgpu (whichever libcuda.so.1 comes
 * first). Prints one JSON object per line: {"bench": ..., "value": ..., "unit": ...}.
 *   sync_rtt        cuStreamQuery on an idle stream: median and p99 (us)
 *   launch_async    empty kernels launched back to back, then one sync (launches/s, best of 5)
 *   launch_sync     one empty launch + cuStreamSynchronize: median (us)
 *   launch_ptrs_async, launch_ptrs_pinned_async  a kernel of four device-pointer parameters
 *                   launched back to back (launches/s, best of 5), before and after 64 MiB of
 *                   pinned host memory exists: through rgpu, the cost of the check for pinned
 *                   host addresses among a launch's parameters (client/bulk/host_mirror.h), which
 *                   PyTorch pays on every launch once its pinned staging buffers exist
 *   memcpy_*        HtoD / DtoH, pageable and pinned, 4 KiB .. 1 GiB (GiB/s, best of reps)
 * Usage: rgpu-bench-micro [max_copy_MiB] */
#include <cuda.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char empty_ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                                ".visible .entry empty()\n{\n ret;\n}\n"
                                ".visible .entry ptrs(.param .u64 a, .param .u64 b, "
                                ".param .u64 c, .param .u64 d)\n{\n ret;\n}\n";

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = "?";                                                                  \
            cuGetErrorName(r_, &n_);                                                               \
            fprintf(stderr, "%s failed: %s\n", #x, n_);                                            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *bench, double value, const char *unit)
{
    printf("{\"bench\": \"%s\", \"value\": %.3f, \"unit\": \"%s\"}\n", bench, value, unit);
    fflush(stdout);
}

static void percentiles(const char *name, double *v, int n)
{
    char buf[96];
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    snprintf(buf, sizeof(buf), "%s_median", name);
    report(buf, v[n / 2], "us");
    snprintf(buf, sizeof(buf), "%s_p99", name);
    report(buf, v[n * 99 / 100], "us");
}

static void bench_rtt(CUstream s)
{
    enum { N = 5000 };
    static double v[N];
    for (int i = 0; i < 200; i++)
        CHECK(cuStreamQuery(s));
    for (int i = 0; i < N; i++) {
        double t = now_us();
        CHECK(cuStreamQuery(s));
        v[i] = now_us() - t;
    }
    percentiles("sync_rtt", v, N);
}

/* Launches of f with args back to back, then one sync: launches/s, best of 5, as the copies
 * take the best of their repetitions (the host's own launch rate varies by some 10% between
 * runs). */
static double launch_rate(CUfunction f, CUstream s, void **args)
{
    enum { N = 20000 };
    double best = 0;

    for (int r = 0; r < 5; r++) {
        double t = now_us();
        for (int i = 0; i < N; i++)
            CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        CHECK(cuStreamSynchronize(s));
        double rate = N / ((now_us() - t) / 1e6);
        best = rate > best ? rate : best;
    }
    return best;
}

static void bench_launch(CUfunction f, CUstream s)
{
    enum { M = 2000 };
    static double v[M];
    double t;

    for (int i = 0; i < 100; i++)
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
    CHECK(cuStreamSynchronize(s));
    report("launch_async", launch_rate(f, s, NULL), "launches/s");
    for (int i = 0; i < M; i++) {
        t = now_us();
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
        CHECK(cuStreamSynchronize(s));
        v[i] = now_us() - t;
    }
    percentiles("launch_sync", v, M);
}

static void bench_launch_ptrs(CUfunction f, CUstream s, const char *name)
{
    CUdeviceptr d[4];
    void *args[] = {&d[0], &d[1], &d[2], &d[3]};

    for (int i = 0; i < 4; i++)
        CHECK(cuMemAlloc(&d[i], 1 << 20));
    report(name, launch_rate(f, s, args), "launches/s");
    for (int i = 0; i < 4; i++)
        CHECK(cuMemFree(d[i]));
}

static double copy_rate(CUdeviceptr d, void *h, size_t size, int htod, CUstream s)
{
    int reps = size <= (1u << 20) ? 50 : size <= (64u << 20) ? 5 : 2;
    double best = 0;

    for (int r = 0; r < reps; r++) {
        double t = now_us();
        if (htod)
            CHECK(cuMemcpyHtoDAsync(d, h, size, s));
        else
            CHECK(cuMemcpyDtoHAsync(h, d, size, s));
        CHECK(cuStreamSynchronize(s));
        double rate = size / ((now_us() - t) / 1e6) / (1 << 30);
        best = rate > best ? rate : best;
    }
    return best;
}

static void bench_memcpy(size_t max, CUstream s)
{
    static const size_t sizes[] = {4096, 65536, 1 << 20, 16 << 20, 256 << 20, 1024ull << 20};
    CUdeviceptr d;
    void *pageable = malloc(max), *pinned;
    char name[64];

    CHECK(cuMemAlloc(&d, max));
    CHECK(cuMemHostAlloc(&pinned, max, 0));
    memset(pageable, 1, max);
    memset(pinned, 1, max);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) && sizes[i] <= max; i++) {
        for (int kind = 0; kind < 4; kind++) {
            int htod = kind < 2, pin = kind & 1;
            snprintf(name, sizeof(name), "memcpy_%s_%s_%zuKiB", htod ? "htod" : "dtoh",
                     pin ? "pinned" : "pageable", sizes[i] >> 10);
            report(name, copy_rate(d, pin ? pinned : pageable, sizes[i], htod, s), "GiB/s");
        }
    }
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree(d));
    free(pageable);
}

int main(int argc, char **argv)
{
    size_t max = (argc > 1 ? strtoull(argv[1], NULL, 10) : 1024) << 20;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f, fp;
    CUstream s;
    void *staging;

    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuModuleLoadData(&mod, empty_ptx));
    CHECK(cuModuleGetFunction(&f, mod, "empty"));
    CHECK(cuModuleGetFunction(&fp, mod, "ptrs"));
    bench_rtt(s);
    bench_launch(f, s);
    bench_launch_ptrs(fp, s, "launch_ptrs_async");
    CHECK(cuMemHostAlloc(&staging, 64 << 20, CU_MEMHOSTALLOC_PORTABLE));
    bench_launch_ptrs(fp, s, "launch_ptrs_pinned_async");
    CHECK(cuMemFreeHost(staging));
    bench_memcpy(max, s);
    CHECK(cuStreamDestroy(s));
    CHECK(cuModuleUnload(mod));
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    report("process_peak_rss", ru.ru_maxrss / 1024.0, "MiB");
    return 0;
}
