/* The fake driver on its own: opened with dlopen and every entry point resolved exactly as
 * gpu-server does (server/driver.h's list, through cuda.h's ABI names), then the behaviour the
 * rest of the test suite relies on: devices, memory bounds, image formats, the test kernels by
 * their mangled names, parameter layouts, events and the sticky fault. "test_fakecuda timeline"
 * runs FAKECUDA_GPU_TIMELINE's test instead (its own process: the fake reads it once). */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/driver.h"

#define VADD      "_Z4vaddPKfS0_Pfi"
#define OOB_WRITE "_Z9oob_writePi"
#define N         1000

static struct srv_driver drv;

#define ABI_NAME(fn)  ABI_NAME_(fn)
#define ABI_NAME_(fn) #fn

static int open_fake(void **state)
{
    setenv("FAKECUDA_MEM_MB", "64", 1);
    drv.dl = dlopen(FAKECUDA_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!drv.dl) {
        print_error("dlopen %s: %s\n", FAKECUDA_PATH, dlerror());
        return -1;
    }
    return 0;
}

static int close_fake(void **state)
{
    dlclose(drv.dl);
    return 0;
}

/* Every name the server resolves exists; a missing one would make gpu-server refuse the fake. */
static int resolve_all(void)
{
    int missing = 0;

#define RESOLVE(fn)                                                                                \
    drv.fn = (__typeof__(drv.fn))dlsym(drv.dl, ABI_NAME(fn));                                      \
    if (!drv.fn) {                                                                                 \
        print_error("libfakecuda.so lacks %s\n", ABI_NAME(fn));                                    \
        missing++;                                                                                 \
    }
    SRV_DRIVER_FUNCS(RESOLVE)
#undef RESOLVE
    return missing;
}

static void test_every_server_symbol(void **state)
{
    assert_int_equal(resolve_all(), 0);
    assert_non_null(dlsym(drv.dl, "cuMemAlloc_v2")); /* the ABI name, not the API name */
}

static void test_init_and_device(void **state)
{
    int count = -1, v = -1;
    char name[64], bus[32];
    size_t total = 0;
    CUdevice dev;
    const char *s;

    assert_int_equal(drv.cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(drv.cuInit(0), CUDA_SUCCESS);
    assert_int_equal(drv.cuDriverGetVersion(&v), CUDA_SUCCESS);
    assert_int_equal(v, 13000);
    assert_int_equal(drv.cuDeviceGetCount(&count), CUDA_SUCCESS);
    assert_int_equal(count, 1);
    assert_int_equal(drv.cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(drv.cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    assert_int_equal(drv.cuDeviceGetName(name, sizeof(name), dev), CUDA_SUCCESS);
    assert_string_equal(name, "rgpu fake device");
    assert_int_equal(drv.cuDeviceGetPCIBusId(bus, sizeof(bus), dev), CUDA_SUCCESS);
    assert_string_equal(bus, "0000:01:00.0");
    assert_int_equal(drv.cuDeviceTotalMem(&total, dev), CUDA_SUCCESS);
    assert_int_equal(total, 64u << 20);
    assert_int_equal(
        drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), 0);
    assert_int_equal(v, 9);
    assert_int_equal(drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
                     0);
    assert_int_equal(v, 132);
    assert_int_equal(drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX - 1, dev), 0);
    assert_int_equal(drv.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, dev),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(drv.cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
    assert_string_equal(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
}

/* Each test below runs on the primary context, made current. */
static int primary_current(void **state)
{
    CUcontext ctx;

    if (drv.cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        drv.cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return -1;
    return 0;
}

static int primary_release(void **state)
{
    return drv.cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS ? 0 : -1;
}

static void test_memory(void **state)
{
    CUdeviceptr d, big;
    size_t free0, free1, total;
    unsigned char in[4097], out[4097];

    assert_int_equal(drv.cuMemGetInfo(&free0, &total), CUDA_SUCCESS);
    assert_int_equal(total, 64u << 20);
    assert_int_equal(drv.cuMemAlloc(&d, sizeof(in)), CUDA_SUCCESS);
    assert_int_equal(d % 256, 0);
    assert_int_equal(drv.cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
    assert_int_equal(free0 - free1, sizeof(in));
    assert_int_equal(drv.cuMemAlloc(&big, 65u << 20), CUDA_ERROR_OUT_OF_MEMORY);

    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (unsigned char)(i * 7);
    assert_int_equal(drv.cuMemcpyHtoD(d, in, sizeof(in)), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemcpyDtoH(out, d, sizeof(out)), CUDA_SUCCESS);
    assert_memory_equal(in, out, sizeof(in));
    /* One byte past the allocation, or memory that was never allocated. */
    assert_int_equal(drv.cuMemcpyHtoD(d + 1, in, sizeof(in)), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(drv.cuMemcpyDtoH(out, (CUdeviceptr)(uintptr_t)in, 4),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(drv.cuMemsetD32(d + 4, 0, sizeof(in) / 4), CUDA_ERROR_INVALID_VALUE);

    assert_int_equal(drv.cuMemsetD2D8(d, 64, 0xab, 16, 4), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemcpyDtoH(out, d, 256), CUDA_SUCCESS);
    assert_int_equal(out[64 * 3 + 15], 0xab);
    assert_int_equal(out[64 * 3 + 16], in[64 * 3 + 16]);

    CUdeviceptr many[16];
    for (int i = 0; i < 16; i++)
        assert_int_equal(drv.cuMemAlloc(&many[i], 1000 + i), CUDA_SUCCESS);
    for (int i = 0; i < 16; i += 2)
        assert_int_equal(drv.cuMemFree(many[i]), CUDA_SUCCESS);
    for (int i = 1; i < 16; i += 2) {
        assert_int_equal(drv.cuMemsetD8(many[i], 1, 1000 + i), CUDA_SUCCESS);
        assert_int_equal(drv.cuMemsetD8(many[i], 1, 1001 + i), CUDA_ERROR_INVALID_VALUE);
        assert_int_equal(drv.cuMemsetD8(many[i - 1], 1, 1), CUDA_ERROR_INVALID_VALUE);
    }
    assert_int_equal(drv.cuMemFree(many[0]), CUDA_ERROR_INVALID_VALUE);
    for (int i = 15; i > 0; i -= 2)
        assert_int_equal(drv.cuMemFree(many[i]), CUDA_SUCCESS);

    assert_int_equal(drv.cuMemFree(d), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemGetInfo(&free1, &total), CUDA_SUCCESS);
    assert_int_equal(free1, free0);
    assert_int_equal(drv.cuMemcpyHtoD(d, in, 4), CUDA_ERROR_INVALID_VALUE);
}

/* A fatbin header as nvcc writes it (magic, version 1, header size 16, payload size); the fake
 * only looks at the magic. */
static const uint32_t fatbin[4] = {0xBA55ED50u, 0x00100001u, 0, 0};

static void test_images(void **state)
{
    static const char ptx[] = ".version 9.0\n.target sm_90\n.entry saxpy_ptx()\n{\n}\n";
    static const char garbage[] = "not a module image";
    struct {
        uint32_t magic, version;
        const void *data;
        void *unused;
    } wrapper = {0x466243B1u, 1, fatbin, NULL};
    CUlibrary lib;
    CUmodule mod;
    CUkernel k;
    CUfunction f;

    assert_int_equal(drv.cuLibraryLoadData(&lib, &wrapper, NULL, NULL, 0, NULL, NULL, 0), 0);
    assert_int_equal(drv.cuLibraryGetKernel(&k, lib, VADD), CUDA_SUCCESS);
    assert_int_equal(drv.cuLibraryGetKernel(&k, lib, "_Z4vaddv"), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(drv.cuLibraryGetModule(&mod, lib), CUDA_SUCCESS);
    assert_int_equal(drv.cuModuleGetFunction(&f, mod, VADD), CUDA_SUCCESS);
    assert_int_equal(drv.cuLibraryUnload(lib), CUDA_SUCCESS);

    assert_int_equal(drv.cuModuleLoadData(&mod, ptx), CUDA_SUCCESS);
    assert_int_equal(drv.cuModuleGetFunction(&f, mod, "saxpy_ptx"), CUDA_SUCCESS);
    assert_int_equal(drv.cuModuleUnload(mod), CUDA_SUCCESS);
    assert_int_equal(drv.cuModuleLoadData(&mod, "\x7f"
                                                "ELF\2\1\1\x33"),
                     CUDA_SUCCESS);
    assert_int_equal(drv.cuModuleUnload(mod), CUDA_SUCCESS);
    assert_int_equal(drv.cuModuleLoadData(&mod, garbage), CUDA_ERROR_INVALID_IMAGE);
    wrapper.data = NULL;
    assert_int_equal(drv.cuModuleLoadData(&mod, &wrapper), CUDA_ERROR_INVALID_IMAGE);
}

static void test_vadd_launch(void **state)
{
    float a[N], b[N], c[N];
    CUdeviceptr da, db, dc;
    CUlibrary lib;
    CUkernel k;
    CUfunction f;
    int n = N, bad = 0;

    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 0.5f * (float)i;
    }
    assert_int_equal(drv.cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0), 0);
    assert_int_equal(drv.cuLibraryGetKernel(&k, lib, VADD), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemAlloc(&da, sizeof(a)), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemAlloc(&db, sizeof(b)), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemAlloc(&dc, sizeof(c)), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemcpyHtoD(da, a, sizeof(a)), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemcpyHtoD(db, b, sizeof(b)), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemsetD32(dc, 0, N), CUDA_SUCCESS);

    /* The CUkernel passed as the CUfunction, as cudart does. */
    void *params[] = {&da, &db, &dc, &n};
    assert_int_equal(
        drv.cuLaunchKernel((CUfunction)k, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL),
        CUDA_SUCCESS);
    assert_int_equal(drv.cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemcpyDtoH(c, dc, sizeof(c)), CUDA_SUCCESS);
    for (int i = 0; i < N; i++)
        bad += c[i] != a[i] + b[i];
    assert_int_equal(bad, 0);

    /* Again through cuKernelGetFunction and the `extra` buffer, into a cleared result. */
    struct {
        CUdeviceptr a, b, c;
        int n;
    } buf = {da, db, dc, N};
    size_t size = offsetof(__typeof__(buf), n) + sizeof(int);
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    assert_int_equal(drv.cuKernelGetFunction(&f, k), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemsetD32(dc, 0, N), CUDA_SUCCESS);
    assert_int_equal(drv.cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, NULL, extra),
                     CUDA_SUCCESS);
    assert_int_equal(drv.cuMemcpyDtoH(c, dc, sizeof(c)), CUDA_SUCCESS);
    for (int i = 0; i < N; i++)
        bad += c[i] != a[i] + b[i];
    assert_int_equal(bad, 0);

    /* Launch configurations a GPU refuses. */
    assert_int_equal(drv.cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, NULL, params, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(drv.cuLaunchKernel(f, 0, 1, 1, 128, 1, 1, 0, NULL, params, NULL),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(drv.cuLaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, NULL, params, NULL),
                     CUDA_ERROR_INVALID_VALUE);

    assert_int_equal(drv.cuMemFree(da), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemFree(db), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemFree(dc), CUDA_SUCCESS);
    assert_int_equal(drv.cuLibraryUnload(lib), CUDA_SUCCESS);
}

static void test_param_info_and_attributes(void **state)
{
    static const size_t off[] = {0, 8, 16, 24}, size[] = {8, 8, 8, 4};
    CUlibrary lib;
    CUkernel k;
    CUfunction f;
    size_t o, s;
    int v;

    assert_int_equal(drv.cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0), 0);
    assert_int_equal(drv.cuLibraryGetKernel(&k, lib, VADD), CUDA_SUCCESS);
    assert_int_equal(drv.cuKernelGetFunction(&f, k), CUDA_SUCCESS);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(drv.cuKernelGetParamInfo(k, i, &o, &s), CUDA_SUCCESS);
        assert_int_equal(o, off[i]);
        assert_int_equal(s, size[i]);
        assert_int_equal(drv.cuFuncGetParamInfo(f, i, &o, &s), CUDA_SUCCESS);
        assert_int_equal(o, off[i]);
    }
    assert_int_equal(drv.cuKernelGetParamInfo(k, 4, &o, &s), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(drv.cuFuncGetParamInfo(f, 4, &o, &s), CUDA_ERROR_INVALID_VALUE);

    assert_int_equal(drv.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f), 0);
    assert_int_equal(v, 1024);
    assert_int_equal(drv.cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 0), 0);
    assert_true(v > 0);
    assert_int_equal(drv.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&v, f, 256, 0, 0),
                     CUDA_SUCCESS);
    assert_true(v > 0);
    assert_int_equal(drv.cuLibraryUnload(lib), CUDA_SUCCESS);
}

static void test_global(void **state)
{
    CUlibrary lib;
    CUdeviceptr d;
    size_t size = 0;
    int in = 42, out = 0;

    assert_int_equal(drv.cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0), 0);
    assert_int_equal(drv.cuLibraryGetGlobal(&d, &size, lib, "dev_counter"), CUDA_SUCCESS);
    assert_int_equal(size, sizeof(int));
    assert_int_equal(drv.cuMemcpyHtoD(d, &in, sizeof(in)), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemcpyDtoH(&out, d, sizeof(out)), CUDA_SUCCESS);
    assert_int_equal(out, 42);
    assert_int_equal(drv.cuLibraryGetGlobal(&d, &size, lib, "no_such_global"),
                     CUDA_ERROR_NOT_FOUND);
    assert_int_equal(drv.cuLibraryUnload(lib), CUDA_SUCCESS);
}

static void test_streams_and_events(void **state)
{
    CUstream s;
    CUevent a, b, untimed;
    float ms = -1;

    assert_int_equal(drv.cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0), 0);
    assert_int_equal(drv.cuEventCreate(&a, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventCreate(&b, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);

    assert_int_equal(drv.cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(drv.cuEventRecordWithFlags(a, s, 0), CUDA_SUCCESS);
    assert_int_equal(drv.cuStreamQuery(s), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventRecordWithFlags(b, s, 0), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventRecordWithFlags(untimed, s, 0), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventSynchronize(b), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventQuery(b), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
    assert_true(ms > 0 && ms < 1000);
    assert_int_equal(drv.cuEventElapsedTime(&ms, a, untimed), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(drv.cuStreamWaitEvent(s, b, 0), CUDA_SUCCESS);
    assert_int_equal(drv.cuStreamSynchronize(s), CUDA_SUCCESS);

    assert_int_equal(drv.cuEventDestroy(a), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventDestroy(b), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventDestroy(untimed), CUDA_SUCCESS);
    assert_int_equal(drv.cuStreamDestroy(s), CUDA_SUCCESS);
}

/* A kernel writing 4 TiB past its buffer: the launch succeeds, then every later call on that
 * context reports the illegal address (until the primary context is reset); other contexts go
 * on working. */
static void fault(CUkernel k, CUdeviceptr d)
{
    void *params[] = {&d};

    assert_int_equal(drv.cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                     CUDA_SUCCESS);
}

/* Issue 15 item 13: the legacy and per-thread stream pseudo-handles are not objects; capture
 * on them is refused (as by the driver), never dereferenced (it crashed the fake). */
static void test_capture_on_pseudo_streams(void **state)
{
    CUstream pseudo[] = {CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, (CUstream)(uintptr_t)0x10};
    CUgraph g;

    for (size_t i = 0; i < sizeof(pseudo) / sizeof(pseudo[0]); i++) {
        assert_int_equal(drv.cuStreamBeginCapture(pseudo[i], CU_STREAM_CAPTURE_MODE_GLOBAL),
                         CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        assert_int_equal(drv.cuStreamEndCapture(pseudo[i], &g), CUDA_ERROR_ILLEGAL_STATE);
    }
}

/* A NUL-terminated image shorter than 4 bytes, at the very end of readable memory: the fake
 * read 4 bytes of it for its magic number. */
static void test_short_image_at_page_end(void **state)
{
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CUmodule mod;

    assert_true(two != MAP_FAILED);
    assert_int_equal(mprotect(two + page, page, PROT_NONE), 0);
    memcpy(two + page - 3, "ab", 3);
    assert_int_equal(drv.cuModuleLoadData(&mod, two + page - 3), CUDA_ERROR_INVALID_IMAGE);
    two[page - 1] = 'c'; /* not even terminated within the 4 bytes, yet only its 3 are read */
    two[page - 2] = '\0';
    assert_int_equal(drv.cuModuleLoadData(&mod, two + page - 2), CUDA_ERROR_INVALID_IMAGE);
    munmap(two, 2 * page);
}

static void test_fault_is_sticky(void **state)
{
    CUcontext primary, ctx;
    CUlibrary lib;
    CUkernel k;
    CUdeviceptr d, d2;

    assert_int_equal(drv.cuCtxGetCurrent(&primary), CUDA_SUCCESS);
    assert_int_equal(drv.cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0), 0);
    assert_int_equal(drv.cuLibraryGetKernel(&k, lib, OOB_WRITE), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemAlloc(&d, sizeof(int)), CUDA_SUCCESS);

    assert_int_equal(drv.cuCtxCreate(&ctx, NULL, 0, 0), CUDA_SUCCESS);
    fault(k, d);
    assert_int_equal(drv.cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(drv.cuMemAlloc(&d2, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(drv.cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(drv.cuCtxSetCurrent(primary), CUDA_SUCCESS);
    assert_int_equal(drv.cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(drv.cuCtxDestroy(ctx), CUDA_SUCCESS);

    fault(k, d);
    assert_int_equal(drv.cuMemAlloc(&d2, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
    assert_int_equal(drv.cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
    assert_int_equal(primary_current(state), 0);
    assert_int_equal(drv.cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(drv.cuLibraryUnload(lib), CUDA_SUCCESS);
}

/* ---- test_fakecuda timeline: FAKECUDA_GPU_TIMELINE (tests/worker/share_bursts.sh) ---- */

static char timeline_path[] = "/tmp/fakecuda-timeline-XXXXXX";

static int open_fake_timeline(void **state)
{
    int fd = mkstemp(timeline_path); /* empty: the fake sizes it */

    if (fd < 0)
        return -1;
    close(fd);
    setenv("FAKECUDA_GPU_TIMELINE", timeline_path, 1);
    if (open_fake(state) != 0 || resolve_all() != 0)
        return -1;
    return drv.cuInit(0) == CUDA_SUCCESS ? 0 : -1;
}

static int close_fake_timeline(void **state)
{
    unlink(timeline_path);
    return close_fake(state);
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1e3 + (t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* sleep_us returns at once and runs on the timeline: queries see it, synchronization waits for
 * it, events time it; a kernel of another process sharing the file runs first, and ours waits
 * behind it (its events measure the wait, as across a real GPU's time slices). */
static void test_timeline(void **state)
{
    CUlibrary lib;
    CUkernel k;
    CUstream s;
    CUevent a, b;
    CUdeviceptr d;
    struct timespec t0;
    unsigned us = 100000; /* long against a loaded CI host's scheduling delays */
    void *params[] = {&us};
    float ms = 0;
    int word = 0, pipefd[2], status = -1;
    char c = 0;
    pid_t child;

    assert_int_equal(drv.cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0), 0);
    assert_int_equal(drv.cuLibraryGetKernel(&k, lib, "_Z8sleep_usj"), CUDA_SUCCESS);
    assert_int_equal(drv.cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0), 0);
    assert_int_equal(drv.cuEventCreate(&a, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventCreate(&b, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);
    assert_int_equal(drv.cuMemAlloc(&d, sizeof(word)), CUDA_SUCCESS);

    /* one kernel of 100 ms on a stream */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(drv.cuEventRecordWithFlags(a, s, 0), CUDA_SUCCESS);
    assert_int_equal(drv.cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), 0);
    assert_int_equal(drv.cuEventRecordWithFlags(b, s, 0), CUDA_SUCCESS);
    assert_true(ms_since(&t0) < 75); /* returned before the kernel ended */
    assert_int_equal(drv.cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    assert_int_equal(drv.cuEventQuery(b), CUDA_ERROR_NOT_READY);
    assert_int_equal(drv.cuStreamQuery(NULL), CUDA_SUCCESS); /* the legacy stream is idle */
    assert_int_equal(drv.cuEventSynchronize(b), CUDA_SUCCESS);
    assert_true(ms_since(&t0) >= 100);
    assert_int_equal(drv.cuStreamQuery(s), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
    assert_true(ms >= 99.9 && ms < 175);

    /* on the legacy stream: a synchronous copy waits for it */
    us = 50000;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(drv.cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), 0);
    assert_int_equal(drv.cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
    assert_int_equal(drv.cuMemcpyDtoH(&word, d, sizeof(word)), CUDA_SUCCESS);
    assert_true(ms_since(&t0) >= 50);
    assert_int_equal(drv.cuStreamQuery(NULL), CUDA_SUCCESS);

    /* another process's 150 ms kernel, launched first: ours (50 ms) ends after both */
    assert_int_equal(pipe(pipefd), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0); /* the child's kernel starts after this */
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        us = 150000;
        c = drv.cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) == 0;
        _exit(write(pipefd[1], &c, 1) == 1 && c ? 0 : 1);
    }
    assert_int_equal(read(pipefd[0], &c, 1), 1);
    assert_int_equal(c, 1);
    assert_int_equal(drv.cuEventRecordWithFlags(a, s, 0), CUDA_SUCCESS);
    assert_int_equal(drv.cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), 0);
    assert_int_equal(drv.cuEventRecordWithFlags(b, s, 0), CUDA_SUCCESS);
    assert_int_equal(drv.cuCtxSynchronize(), CUDA_SUCCESS);
    assert_true(ms_since(&t0) >= 200);
    /* ours, and most of the child's it waited behind (minus the child's moments to the pipe) */
    assert_int_equal(drv.cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
    assert_true(ms >= 125 && ms < 300);
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_int_equal(status, 0);
    close(pipefd[0]);
    close(pipefd[1]);

    assert_int_equal(drv.cuMemFree(d), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventDestroy(a), CUDA_SUCCESS);
    assert_int_equal(drv.cuEventDestroy(b), CUDA_SUCCESS);
    assert_int_equal(drv.cuStreamDestroy(s), CUDA_SUCCESS);
    assert_int_equal(drv.cuLibraryUnload(lib), CUDA_SUCCESS);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest timeline[] = {
        cmocka_unit_test_setup_teardown(test_timeline, primary_current, primary_release),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_server_symbol),
        cmocka_unit_test(test_init_and_device),
        cmocka_unit_test_setup_teardown(test_memory, primary_current, primary_release),
        cmocka_unit_test_setup_teardown(test_images, primary_current, primary_release),
        cmocka_unit_test_setup_teardown(test_vadd_launch, primary_current, primary_release),
        cmocka_unit_test_setup_teardown(test_param_info_and_attributes, primary_current,
                                        primary_release),
        cmocka_unit_test_setup_teardown(test_global, primary_current, primary_release),
        cmocka_unit_test_setup_teardown(test_streams_and_events, primary_current, primary_release),
        cmocka_unit_test_setup_teardown(test_capture_on_pseudo_streams, primary_current,
                                        primary_release),
        cmocka_unit_test_setup_teardown(test_short_image_at_page_end, primary_current,
                                        primary_release),
        cmocka_unit_test_setup_teardown(test_fault_is_sticky, primary_current, primary_release),
    };

    if (argc > 1 && strcmp(argv[1], "timeline") == 0)
        return cmocka_run_group_tests(timeline, open_fake_timeline, close_fake_timeline);
    return cmocka_run_group_tests(tests, open_fake, close_fake);
}
