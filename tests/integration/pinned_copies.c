/* Copies of pinned host memory (cuMemHostAlloc, cuMemHostRegister, read-only registration) in
 * both directions, synchronous and asynchronous, at sizes around the one-sided threshold and
 * across the server's 8 MiB staging chunks, at offsets inside the pinned ranges; freeing or
 * unregistering right after an asynchronous copy; errors; several threads. On an RDMA session
 * the large ones go one-sided (client/bulk/rdma_copy.c): the program prints the one-sided totals it
 * expects ("expect one-sided: ...") for run_programs.sh to compare with the server's count.
 * With --measure it prints the calling thread's CPU time per 16 MiB copy instead.
 * Prints PASS when every byte landed where CUDA puts it. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "expect.h"

#define RDMA_COPY_MIN (64u << 10) /* client/bulk/rdma_copy.c */
#define BIG           (24u << 20)

static unsigned long long htod_n, htod_bytes, dtoh_n, dtoh_bytes; /* expected one-sided */
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

static void expect_one_sided(size_t n, int htod, int writable)
{
    if (n < RDMA_COPY_MIN || (!htod && !writable))
        return;
    pthread_mutex_lock(&count_lock);
    if (htod) {
        htod_n++;
        htod_bytes += n;
    } else {
        dtoh_n++;
        dtoh_bytes += n;
    }
    pthread_mutex_unlock(&count_lock);
}

/* src pinned -> d -> dst pinned, synchronously and on stream st. */
static void round_trip(unsigned char *src, unsigned char *dst, CUdeviceptr d, size_t n, CUstream st,
                       unsigned seed)
{
    pattern_fill(src, n, seed);
    memset(dst, 0, n);
    OK(cuMemcpyHtoD(d, src, n));
    OK(cuMemcpyDtoH(dst, d, n));
    EXPECT(pattern_same(dst, n, seed), "synchronous round trip");
    expect_one_sided(n, 1, 1);
    expect_one_sided(n, 0, 1);
    pattern_fill(src, n, seed + 1);
    memset(dst, 0, n);
    OK(cuMemsetD8Async(d, 0, n, st));
    OK(cuMemcpyHtoDAsync(d, src, n, st));
    OK(cuMemcpyDtoHAsync(dst, d, n, st));
    OK(cuStreamSynchronize(st));
    EXPECT(pattern_same(dst, n, seed + 1), "asynchronous round trip");
    expect_one_sided(n, 1, 1);
    expect_one_sided(n, 0, 1);
}

static void check_sizes(CUstream st)
{
    static const size_t sizes[] = {1, RDMA_COPY_MIN - 1, RDMA_COPY_MIN, (8u << 20) + 3,
                                   (20u << 20) + 5};
    unsigned char *a, *b;
    CUdeviceptr d;

    NEED(cuMemHostAlloc((void **)&a, BIG, 0));
    NEED(cuMemAllocHost((void **)&b, BIG));
    NEED(cuMemAlloc(&d, BIG));
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        round_trip(a + 4097, b + 13, d, sizes[i], st, (unsigned)i); /* not at the ranges' starts */
    OK(cuMemFree(d));
    OK(cuMemFreeHost(a));
    OK(cuMemFreeHost(b));
}

/* cuMemHostRegister'ed memory, and read-only registration (the server may only read it). */
static void check_registered(CUstream st)
{
    const size_t n = 3u << 20;
    unsigned char *a = malloc(2 * n), *ro = malloc(n), *back = malloc(n);
    CUdeviceptr d;

    NEED(cuMemAlloc(&d, n));
    OK(cuMemHostRegister(a, 2 * n, 0));
    round_trip(a, a + n, d, n, st, 7);
    pattern_fill(ro, n, 9);
    OK(cuMemHostRegister(ro, n, CU_MEMHOSTREGISTER_READ_ONLY));
    OK(cuMemcpyHtoD(d, ro, n));
    expect_one_sided(n, 1, 0);
    OK(cuMemcpyDtoH(back, d, n));
    EXPECT(pattern_same(back, n, 9), "read-only registered source");
    OK(cuMemcpyDtoH(ro, d, n)); /* into read-only memory: never one-sided */
    expect_one_sided(n, 0, 0);
    OK(cuMemHostUnregister(ro));
    OK(cuMemHostUnregister(a));
    OK(cuMemFree(d));
    free(a);
    free(ro);
    free(back);
}

/* Freed or unregistered right after an asynchronous copy named it: the copy still completes
 * and the session goes on (on RDMA the client waits for the server before it drops the
 * registration, which the server's READ or WRITE would otherwise hit). */
static void check_release_after_async(CUstream st)
{
    const size_t n = 5u << 20;
    unsigned char *p, *q = malloc(n), *back = malloc(n);
    CUdeviceptr d;

    NEED(cuMemAlloc(&d, n));
    NEED(cuMemHostAlloc((void **)&p, n, 0));
    pattern_fill(p, n, 21);
    OK(cuMemcpyHtoDAsync(d, p, n, st));
    expect_one_sided(n, 1, 1);
    OK(cuMemFreeHost(p));
    OK(cuMemcpyDtoH(back, d, n));
    EXPECT(pattern_same(back, n, 21), "HtoD from pinned memory freed right after the call");
    OK(cuMemHostRegister(q, n, 0));
    memset(q, 0, n);
    OK(cuMemcpyDtoHAsync(q, d, n, st));
    expect_one_sided(n, 0, 1);
    OK(cuMemHostUnregister(q));
    OK(cuStreamSynchronize(st));
    EXPECT(pattern_same(q, n, 21), "DtoH into memory unregistered right after the call");
    OK(cuMemFree(d));
    free(q);
    free(back);
}

/* A failing copy fails (at once, or at the next synchronizing call) and the session goes on. */
static void check_errors(CUstream st)
{
    const size_t n = 2u << 20;
    unsigned char *p;
    CUdeviceptr d;

    NEED(cuMemAlloc(&d, n / 2));
    NEED(cuMemHostAlloc((void **)&p, n, 0));
    EXPECT(cuMemcpyHtoD(d, p, n) != CUDA_SUCCESS, "HtoD beyond the allocation refused");
    EXPECT(cuMemcpyDtoH(p, d, n) != CUDA_SUCCESS, "DtoH beyond the allocation refused");
    OK(cuMemcpyDtoHAsync(p, d, n, st)); /* its error comes at the next synchronizing call */
    EXPECT(cuStreamSynchronize(st) != CUDA_SUCCESS, "asynchronous error reported");
    pattern_fill(p, n / 2, 3);
    OK(cuMemcpyHtoD(d, p, n / 2));
    memset(p, 0, n);
    OK(cuMemcpyDtoH(p, d, n / 2));
    EXPECT(pattern_same(p, n / 2, 3), "copies after the errors");
    expect_one_sided(n / 2, 1, 1);
    expect_one_sided(n / 2, 0, 1);
    OK(cuMemFreeHost(p));
    OK(cuMemFree(d));
}

static void *thread_main(void *arg)
{
    CUcontext ctx = arg;
    CUstream st;

    OK(cuCtxSetCurrent(ctx));
    OK(cuStreamCreate(&st, 0));
    check_release_after_async(st);
    OK(cuStreamDestroy(st));
    return NULL;
}

static double cpu_us(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* CPU time per 16 MiB copy, pinned and pageable, each direction: the calling thread's, and the
 * whole process's (on tests/fakeverbs that includes the fake NIC's thread, which does in
 * software what an adapter does by DMA). */
static void measure(void)
{
    const size_t n = 16u << 20;
    const int reps = 20;
    unsigned char *pinned, *pageable = malloc(n);
    CUdeviceptr d;

    NEED(cuMemAlloc(&d, n));
    NEED(cuMemHostAlloc((void **)&pinned, n, 0));
    memset(pageable, 1, n);
    memset(pinned, 1, n);
    for (int kind = 0; kind < 4; kind++) {
        unsigned char *h = kind & 1 ? pinned : pageable;
        OK(kind < 2 ? cuMemcpyHtoD(d, h, n) : cuMemcpyDtoH(h, d, n)); /* warm-up, registration */
        double t = cpu_us(CLOCK_THREAD_CPUTIME_ID), p = cpu_us(CLOCK_PROCESS_CPUTIME_ID);
        for (int r = 0; r < reps; r++)
            OK(kind < 2 ? cuMemcpyHtoD(d, h, n) : cuMemcpyDtoH(h, d, n));
        printf("cpu %s %s 16MiB: thread %.0f us, process %.0f us per copy\n",
               kind < 2 ? "htod" : "dtoh", kind & 1 ? "pinned" : "pageable",
               (cpu_us(CLOCK_THREAD_CPUTIME_ID) - t) / reps,
               (cpu_us(CLOCK_PROCESS_CPUTIME_ID) - p) / reps);
    }
    /* What a client-side bounce buffer would cost a pageable HtoD: a host copy into pinned
     * memory, then the pinned copy (serially; a pipeline would overlap the two). */
    double t = cpu_us(CLOCK_MONOTONIC), w;
    for (int r = 0; r < reps; r++) {
        memcpy(pinned, pageable, n);
        OK(cuMemcpyHtoD(d, pinned, n));
    }
    w = (cpu_us(CLOCK_MONOTONIC) - t) / reps;
    t = cpu_us(CLOCK_MONOTONIC);
    for (int r = 0; r < reps; r++)
        OK(cuMemcpyHtoD(d, pageable, n));
    printf("wall htod 16MiB: pageable %.0f us, through a pinned bounce %.0f us per copy\n",
           (cpu_us(CLOCK_MONOTONIC) - t) / reps, w);
    OK(cuMemFreeHost(pinned));
    OK(cuMemFree(d));
    free(pageable);
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    CUdevice dev;
    CUstream st;
    pthread_t th[4];

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&st, 0) != CUDA_SUCCESS) {
        printf("FAIL: no context\n");
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "--measure") == 0) {
        measure();
        return failures != 0;
    }
    check_sizes(st);
    check_registered(st);
    check_release_after_async(st);
    check_errors(st);
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, thread_main, ctx);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    OK(cuStreamDestroy(st));
    printf("expect one-sided: %llu HtoD (%llu bytes by RDMA READ), %llu DtoH (%llu bytes by RDMA "
           "WRITE)\n",
           htod_n, htod_bytes, dtoh_n, dtoh_bytes);
    printf(failures == 0 ? "PASS\n" : "FAIL\n");
    return failures != 0;
}
