/* Driver-API behaviour through the client: an unsupported entry point returns
 * CUDA_ERROR_NOT_SUPPORTED (and is logged once), an asynchronous failure comes back at the next
 * synchronizing call, pointer attributes, memory info, and many threads sharing the session. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "expect.h"

#define NTHREADS 8
#define ITERS    200
#define LEN      (64 * 1024)

static CUcontext ctx;

static void *worker(void *arg)
{
    unsigned char *in = malloc(LEN), *out = malloc(LEN);
    CUdeviceptr d;
    int id = (int)(long)arg;

    EXPECT(cuCtxSetCurrent(ctx) == CUDA_SUCCESS, "set current");
    EXPECT(cuMemAlloc(&d, LEN) == CUDA_SUCCESS, "alloc");
    for (int it = 0; it < ITERS; it++) {
        memset(in, (id * 31 + it) & 0xff, LEN);
        EXPECT(cuMemcpyHtoD(d, in, LEN) == CUDA_SUCCESS, "htod");
        EXPECT(cuMemsetD8Async(d + 7, (unsigned char)id, 1, NULL) == CUDA_SUCCESS, "memset");
        EXPECT(cuMemcpyDtoH(out, d, LEN) == CUDA_SUCCESS, "dtoh");
        in[7] = (unsigned char)id;
        EXPECT(memcmp(in, out, LEN) == 0, "thread %d iteration %d: data mixed up", id, it);
    }
    EXPECT(cuMemFree(d) == CUDA_SUCCESS, "free");
    free(in);
    free(out);
    return NULL;
}

static void check_async_error(void)
{
    CUdeviceptr d;

    EXPECT(cuMemAlloc(&d, 256) == CUDA_SUCCESS, "alloc");
    /* An async copy to an address no allocation covers: the call itself does not wait... */
    EXPECT(cuMemcpyDtoDAsync(d + (1ull << 40), d, 256, NULL) == CUDA_SUCCESS, "async returns");
    /* ...and its failure is reported by the next synchronizing call, once. */
    EXPECT(cuCtxSynchronize() == CUDA_ERROR_INVALID_VALUE, "sticky async error");
    EXPECT(cuCtxSynchronize() == CUDA_SUCCESS, "reported once");
    EXPECT(cuMemFree(d) == CUDA_SUCCESS, "free");
}

struct host_check {
    unsigned char *pinned;
    int ok;
};

static void host_fn(void *arg)
{
    struct host_check *c = arg;

    /* Runs after the stream's earlier work: the async copy into pinned memory has landed. */
    c->ok = c->pinned[0] == 0x3c && c->pinned[4095] == 0x3c;
}

static void check_stream_ordered(void)
{
    CUdeviceptr d;
    CUstream s;
    struct host_check c = {NULL, 0};

    EXPECT(cuStreamCreate(&s, 0) == CUDA_SUCCESS, "stream");
    EXPECT(cuMemHostAlloc((void **)&c.pinned, 4096, 0) == CUDA_SUCCESS, "pinned");
    EXPECT(cuMemAllocAsync(&d, 4096, s) == CUDA_SUCCESS, "alloc async");
    EXPECT(cuMemsetD8Async(d, 0x3c, 4096, s) == CUDA_SUCCESS, "memset");
    EXPECT(cuMemcpyDtoHAsync(c.pinned, d, 4096, s) == CUDA_SUCCESS, "dtoh async");
    EXPECT(cuLaunchHostFunc(s, host_fn, &c) == CUDA_SUCCESS, "host func");
    EXPECT(c.ok == 1, "host function saw the copied data");
    EXPECT(cuMemFreeAsync(d, s) == CUDA_SUCCESS, "free async");
    EXPECT(cuStreamSynchronize(s) == CUDA_SUCCESS, "sync");
    EXPECT(cuMemFreeHost(c.pinned) == CUDA_SUCCESS, "free host");
    EXPECT(cuStreamDestroy(s) == CUDA_SUCCESS, "destroy");
}

/* A large async DtoH into pinned memory, then a large async HtoD before any synchronization:
 * both directions carry bulk at once, which must not deadlock the connection. */
static void check_crossing_bulk(void)
{
    const size_t len = 64u << 20;
    unsigned char *a, *b;
    CUdeviceptr d1 = 0, d2 = 0;
    CUstream s;

    EXPECT(cuStreamCreate(&s, 0) == CUDA_SUCCESS, "stream");
    EXPECT(cuMemHostAlloc((void **)&a, len, 0) == CUDA_SUCCESS, "pinned a");
    EXPECT(cuMemHostAlloc((void **)&b, len, 0) == CUDA_SUCCESS, "pinned b");
    EXPECT(cuMemAlloc(&d1, len) == CUDA_SUCCESS && cuMemAlloc(&d2, len) == CUDA_SUCCESS, "alloc");
    memset(a, 0x11, len);
    memset(b, 0x22, len);
    EXPECT(cuMemcpyHtoD(d1, a, len) == CUDA_SUCCESS, "htod");
    EXPECT(cuMemcpyDtoHAsync(b, d1, len, s) == CUDA_SUCCESS, "dtoh async");
    EXPECT(cuMemcpyHtoDAsync(d2, a, len, s) == CUDA_SUCCESS, "htod async");
    EXPECT(cuStreamSynchronize(s) == CUDA_SUCCESS, "sync");
    EXPECT(b[0] == 0x11 && b[len - 1] == 0x11, "dtoh data");
    EXPECT(cuMemFree(d1) == CUDA_SUCCESS && cuMemFree(d2) == CUDA_SUCCESS, "free");
    EXPECT(cuMemFreeHost(a) == CUDA_SUCCESS && cuMemFreeHost(b) == CUDA_SUCCESS, "free host");
    EXPECT(cuStreamDestroy(s) == CUDA_SUCCESS, "destroy");
}

/* A forked child cannot use the parent's session, and its exit must not end it. */
static void check_fork(void)
{
    CUdeviceptr d;
    int status = -1;
    pid_t pid = fork();

    if (pid == 0)
        exit(cuMemAlloc(&d, 64) == CUDA_ERROR_NOT_INITIALIZED ? 0 : 1); /* runs destructors */
    EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child refused");
    EXPECT(cuMemAlloc(&d, 64) == CUDA_SUCCESS && cuMemFree(d) == CUDA_SUCCESS,
           "parent session survives the child");
}

static void check_local_answers(void)
{
    CUdeviceptr d, base;
    size_t size = 0, free_b = 0, total = 0;
    unsigned type = 0;

    EXPECT(cuMemAlloc(&d, 4096) == CUDA_SUCCESS, "alloc");
    EXPECT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100) ==
                   CUDA_SUCCESS &&
               type == CU_MEMORYTYPE_DEVICE,
           "memory type");
    EXPECT(cuMemGetAddressRange(&base, &size, d + 100) == CUDA_SUCCESS && base == d && size == 4096,
           "address range");
    EXPECT(cuMemGetInfo(&free_b, &total) == CUDA_SUCCESS && free_b <= total && total > 0,
           "mem info");
    EXPECT(cuMemFree(d) == CUDA_SUCCESS, "free");
}

/* The special stream handles (thrust and cudart pass cudaStreamPerThread as 0x2) work in
 * every call that takes a stream, including host copies and host functions. */
static int host_fn_runs;
static void count_run(void *arg)
{
    host_fn_runs += arg != NULL;
}

static void check_special_streams(void)
{
    unsigned char in[256], out[256];
    CUdeviceptr d;

    memset(in, 0x3c, sizeof(in));
    EXPECT(cuMemAlloc(&d, sizeof(in)) == CUDA_SUCCESS, "alloc");
    EXPECT(cuMemcpyHtoDAsync(d, in, sizeof(in), CU_STREAM_PER_THREAD) == CUDA_SUCCESS,
           "HtoD on the per-thread stream");
    EXPECT(cuMemcpyDtoHAsync(out, d, sizeof(out), CU_STREAM_LEGACY) == CUDA_SUCCESS,
           "DtoH on the legacy stream");
    EXPECT(cuLaunchHostFunc(CU_STREAM_PER_THREAD, count_run, out) == CUDA_SUCCESS,
           "host function on the per-thread stream");
    EXPECT(cuStreamSynchronize(CU_STREAM_PER_THREAD) == CUDA_SUCCESS &&
               cuStreamSynchronize(CU_STREAM_LEGACY) == CUDA_SUCCESS,
           "synchronize");
    EXPECT(memcmp(in, out, sizeof(in)) == 0 && host_fn_runs == 1, "special streams");
    EXPECT(cuMemFree(d) == CUDA_SUCCESS, "free");
}

int main(void)
{
    pthread_t t[NTHREADS];
    CUdevice dev;
    CUdeviceptr managed;

    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        printf("FAIL: setup\n");
        return 1;
    }
    EXPECT(cuMemAllocManaged(&managed, 64, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_NOT_SUPPORTED,
           "unsupported entry point");
    EXPECT(cuMemAllocManaged(&managed, 64, CU_MEM_ATTACH_GLOBAL) == CUDA_ERROR_NOT_SUPPORTED,
           "unsupported entry point, twice");
    check_async_error();
    check_local_answers();
    check_special_streams();
    check_stream_ordered();
    check_fork();
    check_crossing_bulk();
    for (long i = 0; i < NTHREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    printf("%d threads x %d round trips, %d failure(s)\n", NTHREADS, ITERS, failures);
    printf(failures == 0 ? "PASS\n" : "FAIL\n");
    return failures != 0;
}
