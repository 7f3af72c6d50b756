/* NVIDIA's simpleMultiGPU pattern as the CUDA runtime drives the driver, on every device the
 * client presents (two gpu-servers on the fake driver: multigpu_e2e.sh). The kernels' library is
 * loaded once, context-independently, and its kernel taken once (as cudart does), while device 0
 * is current; then per device: a stream, device memory, pinned input and result buffers; then
 * per device: async HtoD from pinned memory, the kernel on the stream, async DtoH into pinned
 * memory; then per device: its stream synchronized and its result read. Each device's result
 * must be its own input scaled (the fake _Z5scalePffi). A kernel launched by its CUfunction
 * (cuKernelGetFunction in each device's context) is checked the same way. Prints PASS.
 * Usage: multi_reduce */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEV 8
#define N       (1u << 20) /* floats per device */
#define THREADS 256

static const char image[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                            ".visible .entry _Z5scalePffi()\n{\n\tret;\n}\n";

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "line %d: %s failed: %d\n", __LINE__, #call, (int)r_);                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct plan {
    CUcontext ctx;
    CUstream stream;
    CUdeviceptr d_data;
    float *h_data, *h_result; /* pinned */
};

static void prepare(struct plan *p, int dev)
{
    CHECK(cuDevicePrimaryCtxRetain(&p->ctx, dev));
    CHECK(cuCtxSetCurrent(p->ctx));
    CHECK(cuStreamCreate(&p->stream, CU_STREAM_DEFAULT));
    CHECK(cuMemAlloc(&p->d_data, N * sizeof(float)));
    CHECK(cuMemAllocHost((void **)&p->h_result, N * sizeof(float)));
    CHECK(cuMemAllocHost((void **)&p->h_data, N * sizeof(float)));
    for (unsigned j = 0; j < N; j++) {
        p->h_data[j] = (float)(dev + 1) + (float)(j % 1000);
        p->h_result[j] = -1.0f;
    }
}

/* HtoD, the kernel, DtoH, all on the device's stream. */
static void issue(struct plan *p, CUfunction f, float scale)
{
    int n = (int)N;
    void *params[] = {&p->d_data, &scale, &n};

    CHECK(cuCtxSetCurrent(p->ctx));
    CHECK(cuMemcpyHtoDAsync(p->d_data, p->h_data, N * sizeof(float), p->stream));
    CHECK(cuLaunchKernel(f, N / THREADS, 1, 1, THREADS, 1, 1, 0, p->stream, params, NULL));
    CHECK(cuMemcpyDtoHAsync(p->h_result, p->d_data, N * sizeof(float), p->stream));
}

static int collect(struct plan *p, int dev, float scale, const char *how)
{
    CHECK(cuCtxSetCurrent(p->ctx));
    CHECK(cuStreamSynchronize(p->stream));
    for (unsigned j = 0; j < N; j++)
        if (p->h_result[j] != p->h_data[j] * scale) {
            fprintf(stderr, "%s: device %d element %u is %g, expected %g\n", how, dev, j,
                    (double)p->h_result[j], (double)(p->h_data[j] * scale));
            return 1;
        }
    return 0;
}

int main(void)
{
    struct plan plan[MAX_DEV];
    CUlibrary lib;
    CUkernel kernel;
    CUcontext c0;
    int n = 0, bad = 0;

    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&n));
    if (n < 2 || n > MAX_DEV) {
        fprintf(stderr, "%d devices: this test needs 2..%d\n", n, MAX_DEV);
        return 1;
    }
    CHECK(cuDevicePrimaryCtxRetain(&c0, 0));
    CHECK(cuCtxSetCurrent(c0));
    CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(cuLibraryGetKernel(&kernel, lib, "_Z5scalePffi"));
    for (int i = 0; i < n; i++)
        prepare(&plan[i], i);
    /* The kernel handle itself, as cudart launches it. */
    for (int i = 0; i < n; i++)
        issue(&plan[i], (CUfunction)kernel, 2.0f);
    for (int i = 0; i < n; i++)
        bad |= collect(&plan[i], i, 2.0f, "CUkernel");
    /* The kernel's function in each device's context. */
    for (int i = 0; i < n && !bad; i++) {
        CUfunction f;
        CHECK(cuCtxSetCurrent(plan[i].ctx));
        CHECK(cuKernelGetFunction(&f, kernel));
        issue(&plan[i], f, 3.0f);
    }
    for (int i = 0; i < n && !bad; i++)
        bad |= collect(&plan[i], i, 3.0f, "cuKernelGetFunction");
    for (int i = 0; i < n; i++) {
        CHECK(cuCtxSetCurrent(plan[i].ctx));
        CHECK(cuStreamDestroy(plan[i].stream));
        CHECK(cuMemFree(plan[i].d_data));
        CHECK(cuMemFreeHost(plan[i].h_data));
        CHECK(cuMemFreeHost(plan[i].h_result));
    }
    CHECK(cuLibraryUnload(lib));
    if (bad)
        return 1;
    printf("PASS\n");
    return 0;
}
