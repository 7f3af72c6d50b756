/* One process, two devices on two gpu-servers (the fake driver under each: multigpu_e2e.sh):
 * devices 0..1 across the sessions, every call routed to its device's server, disjoint device
 * addresses though both servers answer the same ones, pointer attributes naming the right
 * device, and copies between the devices both ways: cuMemcpyPeer(Async), cuMemcpy /
 * cuMemcpyAsync on unified addresses, HtoD/DtoH of the other device's memory, the same server's
 * two contexts, cuStreamWaitEvent on another device's event, and cuMemcpy3DPeer(Async) between
 * pitched regions of the two devices (in several slabs) and of one server from the other's
 * context, and server-to-server copies from four threads at once. Prints PASS.
 * Usage: two_devices [expected device count = 2] */
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/rgpu_ext.h"

CUresult rgpuDeviceStatus(int device,
                          struct rgpu_device_status *status); /* the client exports it */

#define N (3u << 20) /* bytes per buffer: more than one relay chunk is not needed here */

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "line %d: %s failed: %d\n", __LINE__, #call, (int)r_);                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "line %d: ", __LINE__);                                                \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static unsigned char *pattern(unsigned seed)
{
    unsigned char *p = malloc(N);

    for (size_t i = 0; i < N; i++)
        p[i] = (unsigned char)(i * 31u + seed);
    return p;
}

static void expect_bytes(CUcontext ctx, CUdeviceptr d, const unsigned char *want, const char *what)
{
    unsigned char *got = malloc(N);

    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemcpyDtoH(got, d, N));
    EXPECT(memcmp(got, want, N) == 0, "%s: wrong bytes", what);
    free(got);
}

/* Device memory of each device, and where it lives. */
static void check_addresses(CUcontext c0, CUcontext c1, CUdeviceptr *a0, CUdeviceptr *a1)
{
    int ord = -1;
    CUcontext owner;

    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemAlloc(a0, N));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemAlloc(a1, N));
    EXPECT(*a0 + N <= *a1 || *a1 + N <= *a0, "device 0 [%#llx] and 1 [%#llx] overlap",
           (unsigned long long)*a0, (unsigned long long)*a1);
    CHECK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, *a0));
    EXPECT(ord == 0, "device 0's memory names device %d", ord);
    CHECK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, *a1 + 5));
    EXPECT(ord == 1, "device 1's memory names device %d", ord);
    CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, *a1));
    EXPECT(owner == c1, "device 1's memory names another context");
}

/* Each device's server answers for it: the fake servers have different memory sizes. */
static void check_routing(CUcontext c0, CUcontext c1)
{
    size_t total0, total1, free0, free1, t;

    CHECK(cuDeviceTotalMem(&total0, 0));
    CHECK(cuDeviceTotalMem(&total1, 1));
    EXPECT(total0 == (1024ull << 20) && total1 == (2048ull << 20),
           "device sizes %zu, %zu: not from their own servers", total0, total1);
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemGetInfo(&free0, &t));
    EXPECT(t == total0, "cuMemGetInfo in device 0's context answered %zu", t);
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemGetInfo(&free1, &t));
    EXPECT(t == total1, "cuMemGetInfo in device 1's context answered %zu", t);
    /* A device call about device 1 from a context of device 0 (one its server alone knows)
     * goes to device 1's server, without that context. */
    struct rgpu_device_status st = {.size = sizeof(st)};
    CUcontext own;
    CHECK(cuCtxCreate(&own, NULL, 0, 0));
    CHECK(rgpuDeviceStatus(1, &st));
    EXPECT(st.mem_total == total1, "rgpuDeviceStatus(1) answered %llu",
           (unsigned long long)st.mem_total);
    CHECK(cuCtxDestroy(own));
}

/* A server-to-server copy of several chunks and a partial last one, both ways (both workers
 * move 4 MiB chunks through a host buffer, server/handlers_peer.c). */
static void check_big_peer(CUcontext c0, CUcontext c1)
{
    const size_t big = (21u << 20) + 123;
    unsigned char *p = malloc(big), *got = malloc(big);
    CUdeviceptr b0, b1;

    for (size_t i = 0; i < big; i++)
        p[i] = (unsigned char)(i * 7u + (i >> 20));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemAlloc(&b1, big));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemAlloc(&b0, big));
    CHECK(cuMemcpyHtoD(b0, p, big));
    CHECK(cuMemcpyPeer(b1, c1, b0, c0, big));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemcpyDtoH(got, b1, big));
    EXPECT(memcmp(got, p, big) == 0, "a %zu-byte cuMemcpyPeer 0 -> 1: wrong bytes", big);
    CHECK(cuMemsetD8(b1, 0x5a, 1 << 20)); /* changed, and back the other way */
    memset(p, 0x5a, 1 << 20);
    CHECK(cuMemcpyPeer(b0, c0, b1, c1, big));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemcpyDtoH(got, b0, big));
    EXPECT(memcmp(got, p, big) == 0, "a %zu-byte cuMemcpyPeer 1 -> 0: wrong bytes", big);
    CHECK(cuMemFree(b0));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemFree(b1));
    free(p);
    free(got);
}

/* Server-to-server copies from several threads at once, as XLA's transfer threads shard an
 * array over two hosts' GPUs: every one must arrive (a worker takes one receive at a time). */
#define COPY_THREADS 4
#define COPY_BYTES   (256u << 10)
struct copier {
    CUcontext c0, c1;
    CUdeviceptr src, dst;
    CUresult res;
    pthread_t thread;
};

static void *copier_main(void *arg)
{
    struct copier *c = arg;

    c->res = cuCtxSetCurrent(c->c1);
    for (int i = 0; i < 8 && c->res == CUDA_SUCCESS; i++)
        c->res = cuMemcpyPeerAsync(c->dst, c->c1, c->src, c->c0, COPY_BYTES, NULL);
    if (c->res == CUDA_SUCCESS)
        c->res = cuCtxSynchronize();
    return NULL;
}

static void check_threads_peer(CUcontext c0, CUcontext c1)
{
    struct copier cp[COPY_THREADS];
    unsigned char *p = malloc(COPY_BYTES), *got = malloc(COPY_BYTES);

    for (int t = 0; t < COPY_THREADS; t++) {
        cp[t] = (struct copier){.c0 = c0, .c1 = c1};
        memset(p, 0x11 * (t + 1), COPY_BYTES);
        CHECK(cuCtxSetCurrent(c0));
        CHECK(cuMemAlloc(&cp[t].src, COPY_BYTES));
        CHECK(cuMemcpyHtoD(cp[t].src, p, COPY_BYTES));
        CHECK(cuCtxSetCurrent(c1));
        CHECK(cuMemAlloc(&cp[t].dst, COPY_BYTES));
        CHECK(cuMemsetD8(cp[t].dst, 0, COPY_BYTES));
    }
    for (int t = 0; t < COPY_THREADS; t++)
        EXPECT(pthread_create(&cp[t].thread, NULL, copier_main, &cp[t]) == 0, "pthread_create");
    for (int t = 0; t < COPY_THREADS; t++) {
        pthread_join(cp[t].thread, NULL);
        EXPECT(cp[t].res == CUDA_SUCCESS, "thread %d's server-to-server copies: %d", t,
               (int)cp[t].res);
        memset(p, 0x11 * (t + 1), COPY_BYTES);
        CHECK(cuCtxSetCurrent(c1));
        CHECK(cuMemcpyDtoH(got, cp[t].dst, COPY_BYTES));
        EXPECT(memcmp(got, p, COPY_BYTES) == 0, "thread %d's copy: wrong bytes", t);
        CHECK(cuMemFree(cp[t].dst));
        CHECK(cuCtxSetCurrent(c0));
        CHECK(cuMemFree(cp[t].src));
    }
    free(p);
    free(got);
}

static void check_copies(CUcontext c0, CUcontext c1, CUdeviceptr a0, CUdeviceptr a1)
{
    unsigned char *p = pattern(1), *q = pattern(2), *r = pattern(3);
    CUstream s0, s1;
    CUevent e0, e1;

    /* HtoD into device 1's memory from device 0's context (unified addressing). */
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemcpyHtoD(a1, p, N));
    expect_bytes(c1, a1, p, "HtoD of device 1's memory from device 0's context");
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemcpyHtoD(a0, q, N));
    /* Peer copies both ways. */
    CHECK(cuMemcpyPeer(a1, c1, a0, c0, N));
    expect_bytes(c1, a1, q, "cuMemcpyPeer 0 -> 1");
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemcpyHtoD(a1, r, N));
    CHECK(cuMemcpyPeer(a0, c0, a1, c1, N));
    expect_bytes(c0, a0, r, "cuMemcpyPeer 1 -> 0");
    /* cuMemcpy on unified addresses, from the other device's context. */
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemcpyHtoD(a1, p, N));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemcpy(a0, a1, N));
    expect_bytes(c0, a0, p, "cuMemcpy 1 -> 0");
    /* Stream-ordered: a memset on device 0's stream, an event, device 1's stream waits for it
     * and then copies from device 0 (cuMemcpyPeerAsync on device 1's stream). */
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e0, 0));
    CHECK(cuMemsetD8Async(a0, 0x5a, N, s0));
    CHECK(cuEventRecord(e0, s0));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamWaitEvent(s1, e0, 0));
    CHECK(cuMemcpyPeerAsync(a1, c1, a0, c0, N, s1));
    CHECK(cuMemcpyAsync(a0 + N / 2, a1, N / 2, s1)); /* and back, on the same stream */
    CHECK(cuEventCreate(&e1, 0));
    CHECK(cuCtxSetCurrent(c0)); /* device 1's stream used from device 0's context */
    CHECK(cuEventRecord(e1, s1));
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuEventSynchronize(e1));
    CHECK(cuEventDestroy(e1));
    memset(q, 0x5a, N);
    expect_bytes(c1, a1, q, "cuMemcpyPeerAsync after the other device's event");
    expect_bytes(c0, a0, q, "cuMemcpyAsync 1 -> 0 on device 1's stream");
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuStreamDestroy(s1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuStreamDestroy(s0));
    CHECK(cuEventDestroy(e0));
    free(p), free(q), free(r);
}

/* Two contexts of device 0 (one server): the driver's copy, not the relay. */
static void check_same_server(CUcontext c0, CUdeviceptr a0)
{
    unsigned char *p = pattern(9);
    CUcontext c2;
    CUdeviceptr b;
    int can = -1;

    CHECK(cuCtxCreate(&c2, NULL, 0, 0));
    CHECK(cuMemAlloc(&b, N));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemcpyHtoD(a0, p, N));
    CHECK(cuMemcpyPeer(b, c2, a0, c0, N));
    expect_bytes(c2, b, p, "cuMemcpyPeer between two contexts of one server");
    CHECK(cuMemFree(b));
    CHECK(cuCtxDestroy(c2));
    CHECK(cuDeviceCanAccessPeer(&can, 0, 1));
    EXPECT(can == 0, "devices of two servers reported as peers");
    free(p);
}

/* A library belongs to the process: loaded in device 0's context, its kernel works on device 1
 * (another server) too, as natively (cuBLAS loads its kernels once, then runs them on every
 * device). */
static void check_libraries(CUcontext c0, CUcontext c1, CUdeviceptr a1)
{
    static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                              ".visible .entry _Z5scalePffi()\n{\n ret;\n}\n";
    float x[256], two = 2.0f, back[256];
    int n = 256, threads = 0;
    void *params[] = {&a1, &two, &n};
    CUlibrary lib;
    CUkernel k;
    CUfunction f0, f1;

    for (int i = 0; i < n; i++)
        x[i] = (float)i;
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(cuLibraryGetKernel(&k, lib, "_Z5scalePffi"));
    CHECK(cuKernelGetFunction(&f0, k));
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuKernelGetFunction(&f1, k));
    CHECK(cuKernelGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, 1));
    EXPECT(threads > 0, "kernel attribute on device 1: %d", threads);
    CHECK(cuMemcpyHtoD(a1, x, sizeof(x)));
    CHECK(cuLaunchKernel(f1, 1, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CHECK(cuMemcpyDtoH(back, a1, sizeof(back)));
    for (int i = 0; i < n; i++)
        EXPECT(back[i] == 2.0f * (float)i, "library kernel on device 1: x[%d] = %g", i, back[i]);
    CHECK(cuLibraryUnload(lib));
    CHECK(cuCtxSetCurrent(c0));
}

/* A pitched 3D region of device memory: pitch, rows per slice, slices. */
struct box {
    CUcontext ctx;
    CUdeviceptr d;
    size_t pitch, height, depth;
};

#define W3 1000u /* the region copied: W3 bytes x H3 rows x D3 slices (12 MB: two relay slabs) */
#define H3 1000u
#define D3 12u

static size_t box_bytes(const struct box *b)
{
    return b->pitch * b->height * b->depth;
}

/* Device memory in ctx, filled with seed's pattern (0: zeros). */
static struct box box_new(CUcontext ctx, size_t pitch, size_t height, size_t depth, unsigned seed)
{
    struct box b = {ctx, 0, pitch, height, depth};
    unsigned char *p = calloc(1, box_bytes(&b));

    for (size_t i = 0; seed != 0 && i < box_bytes(&b); i++)
        p[i] = (unsigned char)(i * 7u + i / 4093u + seed);
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc(&b.d, box_bytes(&b)));
    CHECK(cuMemcpyHtoD(b.d, p, box_bytes(&b)));
    free(p);
    return b;
}

static unsigned char *box_read(const struct box *b)
{
    unsigned char *p = malloc(box_bytes(b));

    CHECK(cuCtxSetCurrent(b->ctx));
    CHECK(cuMemcpyDtoH(p, b->d, box_bytes(b)));
    return p;
}

/* The W3 x H3 x D3 region at (sx, sy, sz) of src copied to (dx, dy, dz) of dst, in ctx
 * (on stream s when it is not NULL): then dst holds it there and its old bytes elsewhere. */
static void copy_box(CUcontext ctx, CUstream s, const struct box *dst, size_t dx, size_t dy,
                     size_t dz, const struct box *src, size_t sx, size_t sy, size_t sz,
                     const char *what)
{
    unsigned char *from = box_read(src), *before = box_read(dst), *after;
    CUDA_MEMCPY3D_PEER p = {.srcXInBytes = sx,
                            .srcY = sy,
                            .srcZ = sz,
                            .srcMemoryType = CU_MEMORYTYPE_DEVICE,
                            .srcDevice = src->d,
                            .srcContext = src->ctx,
                            .srcPitch = src->pitch,
                            .srcHeight = src->height,
                            .dstXInBytes = dx,
                            .dstY = dy,
                            .dstZ = dz,
                            .dstMemoryType = CU_MEMORYTYPE_DEVICE,
                            .dstDevice = dst->d,
                            .dstContext = dst->ctx,
                            .dstPitch = dst->pitch,
                            .dstHeight = dst->height,
                            .WidthInBytes = W3,
                            .Height = H3,
                            .Depth = D3};

    CHECK(cuCtxSetCurrent(ctx));
    if (s != NULL) {
        CHECK(cuMemcpy3DPeerAsync(&p, s));
        CHECK(cuStreamSynchronize(s));
    } else {
        CHECK(cuMemcpy3DPeer(&p));
    }
    after = box_read(dst);
    for (size_t z = 0; z < dst->depth; z++)
        for (size_t y = 0; y < dst->height; y++)
            for (size_t x = 0; x < dst->pitch; x++) {
                size_t i = (z * dst->height + y) * dst->pitch + x;
                bool in =
                    x >= dx && x < dx + W3 && y >= dy && y < dy + H3 && z >= dz && z < dz + D3;
                unsigned char want =
                    in ? from[((z - dz + sz) * src->height + y - dy + sy) * src->pitch + x - dx +
                              sx]
                       : before[i];
                EXPECT(after[i] == want, "%s: byte (%zu, %zu, %zu) is %u, expected %u", what, x, y,
                       z, after[i], want);
            }
    free(from), free(before), free(after);
}

static void check_3d_peer(CUcontext c0, CUcontext c1)
{
    struct box a = box_new(c0, 1024, 1010, D3 + 1, 11), b = box_new(c1, 1100, 1003, D3 + 2, 0);
    struct box a2 = box_new(c0, 1000, 1000, D3, 0);
    CUstream s1;

    copy_box(c0, NULL, &b, 50, 2, 2, &a, 8, 5, 1, "cuMemcpy3DPeer device 0 -> 1");
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    copy_box(c1, s1, &a2, 0, 0, 0, &b, 50, 2, 2, "cuMemcpy3DPeerAsync device 1 -> 0");
    copy_box(c1, NULL, &a, 24, 10, 1, &a2, 0, 0, 0, "cuMemcpy3DPeer within device 0 from 1");
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuStreamDestroy(s1));
    CHECK(cuMemFree(b.d));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemFree(a.d));
    CHECK(cuMemFree(a2.d));
}

int main(int argc, char **argv)
{
    int want = argc > 1 ? atoi(argv[1]) : 2, n = 0;
    CUcontext c0, c1;
    CUdeviceptr a0, a1;
    char name[64];

    if (want == 0) { /* one server refuses: cuInit fails; stay a while, the others must let go */
        CUresult r = cuInit(0);
        printf("cuInit: %d\n", (int)r);
        fflush(stdout);
        sleep(3);
        return r == CUDA_SUCCESS ? 1 : 0;
    }
    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&n));
    EXPECT(n == want, "%d devices, expected %d", n, want);
    if (want == 1) { /* CUDA_VISIBLE_DEVICES chose one: say which (by its size) */
        size_t total;
        CHECK(cuDeviceTotalMem(&total, 0));
        printf("visible: %zu MiB\n", total >> 20);
        return 0;
    }
    CHECK(cuDeviceGetName(name, sizeof(name), 1));
    CHECK(cuDevicePrimaryCtxRetain(&c0, 0));
    CHECK(cuDevicePrimaryCtxRetain(&c1, 1));
    check_routing(c0, c1);
    check_addresses(c0, c1, &a0, &a1);
    check_copies(c0, c1, a0, a1);
    check_big_peer(c0, c1);
    check_threads_peer(c0, c1);
    check_same_server(c0, a0);
    check_3d_peer(c0, c1);
    check_libraries(c0, c1, a1);
    CHECK(cuCtxSetCurrent(c1));
    CHECK(cuMemFree(a1));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuMemFree(a0));
    printf("PASS\n");
    return 0;
}
