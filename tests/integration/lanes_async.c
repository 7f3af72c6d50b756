/* Asynchronous copies of pinned memory over the data lanes (client/bulk/lanes.c; run with
 * RGPU_LANES=4 on TCP): they return once sent, and every synchronizing call after them finds
 * their bytes in place. Back to back, mixed with a smaller asynchronous DtoH whose reply the
 * worker holds (the lanes fence before the next copy), with a copy that fails on the worker
 * (beyond its allocation: the lanes stay in step), with pinned memory freed right after the call,
 * from several threads at once, and synchronized by stream, by event, by context. Prints how
 * long an asynchronous 64 MiB copy took to return against its completion (not a check).
 * Prints PASS when every byte landed where CUDA puts it. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "expect.h"

#define BIG   (64u << 20)          /* over the lanes (32 MiB and up) */
#define ODD   ((40u << 20) + 4097) /* the lanes' last stripe cut short */
#define SMALL (16u << 20)          /* the session's connection, deferred reply */

static unsigned char *pinned(size_t n)
{
    unsigned char *p;

    NEED(cuMemHostAlloc((void **)&p, n, 0));
    memset(p, 0, n);
    return p;
}

/* Two HtoD back to back, a small deferred DtoH, a DtoH over the lanes, one more HtoD, then the
 * stream synchronizes. */
static void check_back_to_back(CUstream st, unsigned seed)
{
    unsigned char *a = pinned(BIG), *b = pinned(BIG), *c = pinned(SMALL), *d = pinned(BIG),
                  *e = pinned(ODD);
    CUdeviceptr d1, d2, d3;

    NEED(cuMemAlloc(&d1, BIG));
    NEED(cuMemAlloc(&d2, BIG));
    NEED(cuMemAlloc(&d3, ODD));
    pattern_fill(a, BIG, seed);
    pattern_fill(b, BIG, seed + 1);
    pattern_fill(e, ODD, seed + 2);
    OK(cuMemcpyHtoDAsync(d1, a, BIG, st));
    OK(cuMemcpyHtoDAsync(d2, b, BIG, st));
    OK(cuMemcpyDtoHAsync(c, d1, SMALL, st));
    OK(cuMemcpyDtoHAsync(d, d2, BIG, st));
    OK(cuMemcpyHtoDAsync(d3, e, ODD, st));
    OK(cuStreamSynchronize(st));
    EXPECT(pattern_same(c, SMALL, seed), "small DtoH between lane copies");
    EXPECT(pattern_same(d, BIG, seed + 1), "DtoH over the lanes, after two HtoD");
    memset(a, 0, BIG);
    OK(cuMemcpyDtoHAsync(a, d3, ODD, st));
    OK(cuStreamSynchronize(st));
    EXPECT(pattern_same(a, ODD, seed + 2), "HtoD of an odd size, then back");
    OK(cuMemFree(d1));
    OK(cuMemFree(d2));
    OK(cuMemFree(d3));
    OK(cuMemFreeHost(a));
    OK(cuMemFreeHost(b));
    OK(cuMemFreeHost(c));
    OK(cuMemFreeHost(d));
    OK(cuMemFreeHost(e));
}

/* Synchronized by an event, and by the context; the source freed right after the call. */
static void check_other_syncs(CUstream st)
{
    unsigned char *a = pinned(BIG), *b = pinned(BIG);
    CUdeviceptr d;
    CUevent ev;

    NEED(cuMemAlloc(&d, BIG));
    NEED(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    pattern_fill(a, BIG, 40);
    OK(cuMemcpyHtoDAsync(d, a, BIG, st));
    OK(cuMemcpyDtoHAsync(b, d, BIG, st));
    OK(cuEventRecord(ev, st));
    OK(cuEventSynchronize(ev));
    EXPECT(pattern_same(b, BIG, 40), "DtoH over the lanes, event synchronized");
    pattern_fill(a, BIG, 41);
    OK(cuMemcpyHtoDAsync(d, a, BIG, st));
    OK(cuMemFreeHost(a)); /* waits for the lanes to be done with it */
    memset(b, 0, BIG);
    OK(cuMemcpyDtoHAsync(b, d, BIG, st));
    OK(cuCtxSynchronize());
    EXPECT(pattern_same(b, BIG, 41), "HtoD from pinned memory freed right after the call");
    OK(cuEventDestroy(ev));
    OK(cuMemFree(d));
    OK(cuMemFreeHost(b));
}

/* A lane copy that fails on the worker (beyond its allocation) fails at the next synchronizing
 * call (natively the call itself may fail), and the lanes stay in step for the next one. */
static void check_error(CUstream st)
{
    unsigned char *a = pinned(BIG), *b = pinned(BIG);
    CUdeviceptr d, half;

    NEED(cuMemAlloc(&d, BIG));
    NEED(cuMemAlloc(&half, BIG / 2));
    pattern_fill(a, BIG, 50);
    CUresult at_call = cuMemcpyHtoDAsync(half, a, BIG, st), at_sync = cuStreamSynchronize(st);
    EXPECT(at_call != CUDA_SUCCESS || at_sync != CUDA_SUCCESS, "the failed lane copy reported");
    OK(cuMemcpyHtoDAsync(d, a, BIG, st));
    OK(cuMemcpyDtoHAsync(b, d, BIG, st));
    OK(cuStreamSynchronize(st));
    EXPECT(pattern_same(b, BIG, 50), "lane copies after a failed one");
    OK(cuMemFree(d));
    OK(cuMemFree(half));
    OK(cuMemFreeHost(a));
    OK(cuMemFreeHost(b));
}

static void *thread_main(void *arg)
{
    CUcontext ctx = arg;
    CUstream st;

    OK(cuCtxSetCurrent(ctx));
    OK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    for (unsigned i = 0; i < 2; i++)
        check_back_to_back(st, 60 + i);
    OK(cuStreamDestroy(st));
    return NULL;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* How long an asynchronous 64 MiB HtoD takes to return, against until it completed. */
static void report_overlap(CUstream st)
{
    unsigned char *a = pinned(BIG);
    CUdeviceptr d;
    double t0, t1;

    NEED(cuMemAlloc(&d, BIG));
    OK(cuMemcpyHtoD(d, a, BIG)); /* the lanes connected */
    t0 = now_us();
    OK(cuMemcpyHtoDAsync(d, a, BIG, st));
    t1 = now_us();
    OK(cuStreamSynchronize(st));
    printf("async 64 MiB HtoD: returned after %.0f us, complete after %.0f us\n", t1 - t0,
           now_us() - t0);
    OK(cuMemFree(d));
    OK(cuMemFreeHost(a));
}

int main(void)
{
    CUcontext ctx;
    CUdevice dev;
    CUstream st;
    pthread_t th[3];

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&st, 0) != CUDA_SUCCESS) {
        printf("FAIL: no context\n");
        return 1;
    }
    check_back_to_back(st, 1);
    check_other_syncs(st);
    check_error(st);
    for (int i = 0; i < 3; i++)
        NEED(pthread_create(&th[i], NULL, thread_main, ctx) == 0 ? CUDA_SUCCESS
                                                                 : CUDA_ERROR_OPERATING_SYSTEM);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    report_overlap(st);
    OK(cuStreamDestroy(st));
    printf(failures == 0 ? "PASS\n" : "FAIL\n");
    return failures != 0;
}
