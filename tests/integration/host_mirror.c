/* Mapped pinned host memory through the real client (client/bulk/host_mirror.c, the worker's
 * mirrors in server/handlers_host_mirror.c, the fake driver's cuMemHostRegister): GPU work that
 * names a pinned host address. The patterns of the programs that need it:
 *   jax:   XLA's redzone checker: a pinned buffer zeroed with cuMemsetD32Async on its host
 *          address, a kernel that writes into it, cuStreamSynchronize, the host reads it;
 *   p2p:   p2pBandwidthLatencyTest's delay flag: the host writes the flag, a kernel reads it, the
 *          host writes again while the kernel may still run: after the sync the host's write
 *          stands where the GPU wrote nothing, and the GPU's writes arrive where it did;
 *   copies: an asynchronous DtoH copy into mirrored memory and an HtoD copy out of it, in stream
 *          order with the kernel that uses it;
 *   free:  pinned memory used by the GPU, freed or unregistered, many more times than a session
 *          may hold mirrors (so the worker must let each one go);
 *   attrs: cuMemHostGetDevicePointer and CU_POINTER_ATTRIBUTE_DEVICE_POINTER;
 *   graph_host: a graph's host node reads what GPU work before the launch wrote: the client
 *          synchronizes the stream before it runs host nodes by the plain call path (not an
 *          entry point that asks for the read-back), and every synchronizing op reads back.
 * Arguments name the checks to run (all but --plain when none). --plain only launches a kernel
 * on device memory while pinned memory exists and takes copies (the caller checks with
 * RGPU_STATS that no mirror op went on the wire).
 * Prints PASS when every check held. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"

static const char ptx[] = ".version 8.0\n.target sm_90\n.entry empty() { ret; }\n";
static CUfunction k_redzone, k_delay, k_read_flag, k_vadd;
static CUstream st;

static void launch(CUfunction f, void **args)
{
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, st, args, NULL));
}

static void check_jax(void)
{
    unsigned *out, result = 0;
    CUdeviceptr buf;
    unsigned long long n = 1024;
    void *args[] = {&buf, &n, &out};

    NEED(cuMemHostAlloc((void **)&out, 4 * sizeof(unsigned), CU_MEMHOSTALLOC_PORTABLE));
    NEED(cuMemAlloc(&buf, n));
    out[0] = out[1] = out[2] = out[3] = 0xdeadbeef;
    OK(cuMemsetD8Async(buf, 0xab, n, st));
    OK(cuMemsetD8Async(buf + 10, 0, 5, st)); /* five bytes of the redzone overwritten */
    OK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)out, 0, 4, st));
    launch(k_redzone, args);
    /* XLA reads the result back with a copy from the buffer's address, as a device pointer. */
    OK(cuMemcpyDtoHAsync(&result, (CUdeviceptr)(uintptr_t)out, sizeof(result), st));
    OK(cuStreamSynchronize(st));
    EXPECT(result == 5, "redzone: copied back %u, expected 5", result);
    EXPECT(out[0] == 5 && out[1] == 0 && out[2] == 0 && out[3] == 0,
           "redzone: host reads %#x %#x %#x %#x, expected 5 0 0 0", out[0], out[1], out[2], out[3]);
    /* Again with the redzone intact: the host's zero goes up, the kernel writes nothing. */
    OK(cuMemsetD8Async(buf + 10, 0xab, 5, st));
    out[0] = 0;
    out[1] = 42;
    launch(k_redzone, args);
    OK(cuCtxSynchronize());
    EXPECT(out[0] == 0 && out[1] == 42, "redzone, second run: %u %u", out[0], out[1]);
    OK(cuMemFree(buf));
    OK(cuMemFreeHost(out));
}

static void check_p2p(void)
{
    int *flag, seen = -1;
    CUdeviceptr d;
    unsigned long long timeout = 10000000;
    int *second;
    void *delay_args[] = {&flag, &timeout};
    void *read_args[] = {&flag, &d};
    void *write_args[] = {&flag, &second};

    NEED(cuMemHostAlloc((void **)&flag, 2 * sizeof(int), CU_MEMHOSTALLOC_PORTABLE));
    NEED(cuMemAlloc(&d, sizeof(int)));
    second = flag + 1;
    flag[0] = 0;
    flag[1] = 77;
    launch(k_delay, delay_args); /* spins on *flag natively: the flag must be mapped */
    launch(k_read_flag, read_args);
    flag[0] = 1; /* while the kernels may run: the mirror is DIRTY */
    OK(cuStreamSynchronize(st));
    EXPECT(flag[0] == 1, "the host's write to the flag was lost (%d)", flag[0]);
    OK(cuMemcpyDtoH(&seen, d, sizeof(seen)));
    EXPECT(seen == 0, "the kernel saw flag %d, expected 0", seen);
    /* Next round: the host's new value reaches the GPU. */
    flag[0] = 7;
    launch(k_read_flag, read_args);
    OK(cuStreamSynchronize(st));
    OK(cuMemcpyDtoH(&seen, d, sizeof(seen)));
    EXPECT(seen == 7, "the kernel saw flag %d, expected 7", seen);
    /* A merge: the GPU writes flag[1] (= flag[0]); the host writes flag[0] meanwhile. */
    flag[0] = 5;
    launch(k_read_flag, write_args);
    flag[0] = 9;
    OK(cuStreamSynchronize(st));
    EXPECT(flag[0] == 9 && flag[1] == 5, "merge: flag %d %d, expected 9 5", flag[0], flag[1]);
    OK(cuMemFree(d));
    OK(cuMemFreeHost(flag));
}

static void check_copies(void)
{
    unsigned char *h, back[256];
    CUdeviceptr d, d2;

    NEED(cuMemAllocHost((void **)&h, 8192));
    NEED(cuMemAlloc(&d, 256));
    NEED(cuMemAlloc(&d2, 256));
    memset(h, 0x11, 8192);
    OK(cuMemsetD8(d, 0x5a, 256));
    OK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)h, 0x22, 4096, st)); /* mirrored, DIRTY */
    OK(cuMemcpyDtoHAsync(h + 100, d, 256, st));                     /* after the memset */
    OK(cuMemcpyHtoDAsync(d2, h + 64, 256, st)); /* the GPU's bytes: 0x22 then 0x5a */
    OK(cuStreamSynchronize(st));
    EXPECT(h[99] == 0x22 && h[100] == 0x5a && h[355] == 0x5a && h[356] == 0x22 && h[4095] == 0x22 &&
               h[4096] == 0x11,
           "DtoH into mirrored memory: %#x %#x %#x %#x %#x %#x", h[99], h[100], h[355], h[356],
           h[4095], h[4096]);
    OK(cuMemcpyDtoH(back, d2, sizeof(back)));
    EXPECT(back[0] == 0x22 && back[35] == 0x22 && back[36] == 0x5a && back[255] == 0x5a,
           "HtoD out of mirrored memory: %#x %#x %#x %#x", back[0], back[35], back[36], back[255]);
    /* A synchronous DtoH into it, after a kernel wrote it: both land. */
    memset(h, 0x33, 8192);
    OK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)h + 8000, 0x44, 8, st));
    OK(cuMemcpyDtoH(h, d, 16));
    EXPECT(h[0] == 0x5a && h[16] == 0x33 && h[8000] == 0x44 && h[8008] == 0x33,
           "synchronous DtoH: %#x %#x %#x %#x", h[0], h[16], h[8000], h[8008]);
    OK(cuMemFree(d));
    OK(cuMemFree(d2));
    OK(cuMemFreeHost(h));
}

/* Each round mirrors a new registered range (kept allocated, so every address differs) and a
 * pinned allocation: 300 rounds are more than the 256 mirrors a session may hold at once, so
 * the worker must let each one go at cuMemHostUnregister / cuMemFreeHost. */
#define ROUNDS 300
static void check_free(void)
{
    static void *regs[ROUNDS];
    int failed = 0;

    for (int i = 0; i < ROUNDS; i++) {
        unsigned *p, *reg;
        NEED(cuMemHostAlloc((void **)&p, 64, 0));
        regs[i] = reg = aligned_alloc(4096, 4096);
        NEED(cuMemHostRegister(reg, 4096, 0));
        p[0] = 1;
        reg[3] = 1;
        OK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)p, (unsigned)i, 1, st));
        OK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)reg + 12, (unsigned)i + 1, 1, st));
        OK(cuStreamSynchronize(st));
        failed += p[0] != (unsigned)i || reg[3] != (unsigned)i + 1;
        OK(cuMemFreeHost(p));
        OK(cuMemHostUnregister(reg));
    }
    for (int i = 0; i < ROUNDS; i++)
        free(regs[i]);
    EXPECT(failed == 0, "%d of %d rounds of mirrored memory let go and made again failed", failed,
           ROUNDS);
}

static void check_attributes(void)
{
    void *p;
    CUdeviceptr dp = 0, attr = 0;
    int local;

    NEED(cuMemHostAlloc(&p, 100, CU_MEMHOSTALLOC_DEVICEMAP));
    OK(cuMemHostGetDevicePointer(&dp, (char *)p + 10, 0));
    EXPECT(dp == (CUdeviceptr)(uintptr_t)p + 10, "device pointer %#llx of %p", dp, p);
    OK(cuPointerGetAttribute(&attr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                             (CUdeviceptr)(uintptr_t)p));
    EXPECT(attr == (CUdeviceptr)(uintptr_t)p, "pointer attribute %#llx of %p", attr, p);
    EXPECT_RESULT(cuMemHostGetDevicePointer(&dp, &local, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(p));
}

static unsigned host_node_saw;

static void CUDA_CB host_node(void *p)
{
    host_node_saw = *(volatile unsigned *)p;
}

static void check_graph_host(void)
{
    unsigned *h;
    CUgraph g;
    CUgraphExec ge;
    CUgraphNode node;
    CUDA_HOST_NODE_PARAMS hp = {.fn = host_node};

    NEED(cuMemHostAlloc((void **)&h, 4096, 0));
    h[0] = 1;
    hp.userData = h;
    OK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)h, 2, 1, st)); /* mirrored, DIRTY */
    OK(cuGraphCreate(&g, 0));
    OK(cuGraphAddHostNode(&node, g, NULL, 0, &hp));
    OK(cuGraphInstantiate(&ge, g, 0));
    OK(cuGraphLaunch(ge, st)); /* the host node runs once the stream has drained */
    EXPECT(host_node_saw == 2, "the graph's host node read %u, expected the memset's 2",
           host_node_saw);
    OK(cuStreamSynchronize(st));
    EXPECT(h[0] == 2, "after the synchronization the host reads %u, expected 2", h[0]);
    OK(cuGraphExecDestroy(ge));
    OK(cuGraphDestroy(g));
    OK(cuMemFreeHost(h));
}

/* Pinned memory exists (and takes a copy) but the kernel names only device memory. */
static void plain(void)
{
    float *h;
    CUdeviceptr a, b, c;
    int n = 64;
    void *args[] = {&a, &b, &c, &n};

    NEED(cuMemHostAlloc((void **)&h, 64 * sizeof(float), 0));
    NEED(cuMemAlloc(&a, 256));
    NEED(cuMemAlloc(&b, 256));
    NEED(cuMemAlloc(&c, 256));
    for (int i = 0; i < 64; i++)
        h[i] = (float)i;
    OK(cuMemcpyHtoDAsync(a, h, 256, st));
    OK(cuMemcpyHtoDAsync(b, h, 256, st));
    OK(cuLaunchKernel(k_vadd, 1, 1, 1, 64, 1, 1, 0, st, args, NULL));
    OK(cuMemcpyDtoHAsync(h, c, 256, st));
    OK(cuStreamSynchronize(st));
    EXPECT(h[10] == 20.0f, "vadd: %f", h[10]);
    OK(cuMemFree(a));
    OK(cuMemFree(b));
    OK(cuMemFree(c));
    OK(cuMemFreeHost(h));
}

static const struct {
    const char *name;
    void (*run)(void);
} checks[] = {{"--plain", plain},
              {"jax", check_jax},
              {"p2p", check_p2p},
              {"copies", check_copies},
              {"free", check_free},
              {"attrs", check_attributes},
              {"graph_host", check_graph_host}};

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;

    NEED(cuInit(0));
    NEED(cuDeviceGet(&dev, 0));
    NEED(cuCtxCreate(&ctx, NULL, 0, dev));
    NEED(cuModuleLoadData(&mod, ptx));
    NEED(cuModuleGetFunction(&k_redzone, mod, "_Z13redzone_checkPKhyPj"));
    NEED(cuModuleGetFunction(&k_delay, mod, "_Z5delayPViy"));
    NEED(cuModuleGetFunction(&k_read_flag, mod, "_Z9read_flagPKiPi"));
    NEED(cuModuleGetFunction(&k_vadd, mod, "_Z4vaddPKfS0_Pfi"));
    NEED(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    for (int i = 1; i < argc; i++) /* the checks named (each fails alone without mirrors) */
        for (size_t c = 0; c < sizeof(checks) / sizeof(checks[0]); c++)
            if (strcmp(argv[i], checks[c].name) == 0)
                checks[c].run();
    if (argc == 1)
        for (size_t c = 1; c < sizeof(checks) / sizeof(checks[0]); c++)
            checks[c].run();
    OK(cuStreamDestroy(st));
    OK(cuModuleUnload(mod));
    OK(cuCtxDestroy(ctx));
    printf("%s\n", failures ? "host_mirror: FAILED" : "host_mirror: PASS");
    return failures != 0;
}
