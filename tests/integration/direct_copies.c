/* GPUDirect RDMA (server/handlers_rdma_copy.c): one-sided copies of pinned memory that go
 * straight to and from device memory must put every byte where CUDA puts it. Each direct copy
 * is checked through another path (pageable copies keep the byte stream and the worker's
 * device copies), so a direct copy that lands in the wrong memory cannot hide behind a direct
 * copy back: HtoD direct then DtoH pageable; HtoD pageable or a memset then DtoH direct; at
 * offsets inside allocations whose sizes are not page multiples; in stream order after a
 * memset on a stream and on the legacy stream.
 *
 * Stale registrations: an allocation that went direct is freed and memory is allocated again
 * at the same address (the program retries until it gets it, and says so: "same address: yes");
 * a direct copy into the new one must land in it, not in the freed one.
 *
 * Prints "expect direct: N HtoD (B bytes), M DtoH (C bytes)" (every pinned copy of 64 KiB or
 * more; run by rdma_direct.sh, which compares it with the worker's count) and PASS. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"

#define RDMA_COPY_MIN (64u << 10) /* client/bulk/rdma_copy.c */

static unsigned long long htod_n, htod_bytes, dtoh_n, dtoh_bytes;

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + (i >> 12) + seed * 31);
}

/* The first byte where p differs from fill(seed), or n. */
static size_t first_bad(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 7 + (i >> 12) + seed * 31))
            return i;
    return n;
}

static void count(size_t n, int htod)
{
    if (n < RDMA_COPY_MIN)
        return;
    if (htod) {
        htod_n++;
        htod_bytes += n;
    } else {
        dtoh_n++;
        dtoh_bytes += n;
    }
}

/* Pinned HtoD (direct) checked by a pageable DtoH; pageable HtoD checked by a pinned DtoH
 * (direct); n bytes at d. */
static void cross_check(CUdeviceptr d, size_t n, unsigned char *pinned, unsigned seed)
{
    unsigned char *pageable = malloc(n);
    size_t bad;

    fill(pinned, n, seed);
    OK(cuMemcpyHtoD(d, pinned, n));
    count(n, 1);
    memset(pageable, 0, n);
    OK(cuMemcpyDtoH(pageable, d, n));
    bad = first_bad(pageable, n, seed);
    EXPECT(bad == n, "direct HtoD of %zu bytes at %#llx: byte %zu differs", n,
           (unsigned long long)d, bad);
    fill(pageable, n, seed + 1);
    OK(cuMemcpyHtoD(d, pageable, n));
    memset(pinned, 0, n);
    OK(cuMemcpyDtoH(pinned, d, n));
    count(n, 0);
    bad = first_bad(pinned, n, seed + 1);
    EXPECT(bad == n, "direct DtoH of %zu bytes at %#llx: byte %zu differs", n,
           (unsigned long long)d, bad);
    free(pageable);
}

/* Sizes that are not page multiples, offsets inside the allocation, sync and async. */
static void check_ranges(CUstream st, unsigned char *pinned)
{
    const size_t size = (3u << 20) + 100;
    CUdeviceptr d;

    OK(cuMemAlloc(&d, size));
    cross_check(d, size, pinned, 1);
    cross_check(d + 4097, RDMA_COPY_MIN, pinned, 2);
    cross_check(d + size - (1u << 20), 1u << 20, pinned, 3); /* up to the allocation's end */
    /* In stream order: a memset queued on the stream, then a direct DtoH on it. */
    OK(cuMemsetD8Async(d, 0x5a, size, st));
    memset(pinned, 0, size);
    OK(cuMemcpyDtoHAsync(pinned, d, size, st));
    count(size, 0);
    OK(cuStreamSynchronize(st));
    EXPECT(pinned[0] == 0x5a && pinned[size - 1] == 0x5a && pinned[size / 2] == 0x5a,
           "async direct DtoH after a memset on its stream");
    /* The legacy stream: a memset on it, then a synchronous direct HtoD, then a check. */
    OK(cuMemsetD8Async(d, 0, size, NULL));
    fill(pinned, size, 4);
    OK(cuMemcpyHtoDAsync(d, pinned, size, st));
    count(size, 1);
    OK(cuStreamSynchronize(st));
    memset(pinned, 0, size);
    OK(cuMemcpyDtoH(pinned, d, size));
    count(size, 0);
    EXPECT(first_bad(pinned, size, 4) == size, "async direct HtoD after a legacy memset");
    OK(cuMemFree(d));
}

/* Free an allocation that went direct, allocate at the same address, copy direct again. */
static void check_reuse(unsigned char *pinned)
{
    const size_t size = 4u << 20;
    CUdeviceptr d, again = 0, keep[64];
    int kept = 0;

    OK(cuMemAlloc(&d, size));
    cross_check(d, size, pinned, 5);
    OK(cuMemFree(d));
    while (kept < 64) { /* holding the others until the address comes back */
        OK(cuMemAlloc(&again, size));
        if (again == d)
            break;
        keep[kept++] = again;
    }
    if (again != d)
        again = keep[--kept];
    printf("same address: %s (after %d other allocations)\n", again == d ? "yes" : "no", kept);
    cross_check(again, size, pinned, 8); /* seeds unlike the ones d held */
    cross_check(again + 8192, size - 8192, pinned, 10);
    OK(cuMemFree(again));
    while (kept > 0)
        OK(cuMemFree(keep[--kept]));
}

int main(void)
{
    unsigned char *pinned;
    CUcontext ctx;
    CUdevice dev;
    CUstream st;

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&st, 0) != CUDA_SUCCESS ||
        cuMemHostAlloc((void **)&pinned, 8u << 20, 0) != CUDA_SUCCESS) {
        printf("FAIL: no context\n");
        return 1;
    }
    check_ranges(st, pinned);
    check_reuse(pinned);
    OK(cuMemFreeHost(pinned));
    OK(cuStreamDestroy(st));
    printf("expect direct: %llu HtoD (%llu bytes), %llu DtoH (%llu bytes)\n", htod_n, htod_bytes,
           dtoh_n, dtoh_bytes);
    printf(failures == 0 ? "PASS\n" : "FAIL\n");
    return failures != 0;
}
