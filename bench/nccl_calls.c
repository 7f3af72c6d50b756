/* The CPU cost of an NCCL call to the application: a one-rank communicator, then many small
 * collectives enqueued back to back (the time per call, without waiting for them), the
 * synchronization after them, ncclCommGetAsyncError (PyTorch's watchdog polls it; through
 * rgpu it is a round trip), and an 8-byte all-reduce waited for each time (all-reduce +
 * cuStreamSynchronize, median of 2000: nccl_busbw's latency row; through rgpu one round trip). The
 * same binary runs natively (the real libnccl.so.2 and libcuda.so.1 first in the library path) and
 * through rgpu (the shim and the client): bench/nccl_calls.sh. Prints one JSON line. Usage:
 * rgpu-bench-nccl [CALLS]   (default 20000) */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

#include <cuda.h>

#include "nccl/nccl_abi.h"

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclGetVersion(int *v);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e);
ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                           CUstream);

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if ((x) != 0) {                                                                            \
            fprintf(stderr, "%s failed\n", #x);                                                    \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    int calls = argc > 1 ? atoi(argv[1]) : 20000, version = 0, polls = 2000;
    double t0, t_enqueue, t_sync, t_poll, lat[2000];
    ncclUniqueId id;
    ncclComm_t comm;
    ncclResult_t e;
    CUcontext ctx;
    CUdevice dev;
    CUstream st;
    CUdeviceptr buf;

    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&buf, 4096));
    CHECK(ncclGetVersion(&version));
    CHECK(ncclGetUniqueId(&id));
    CHECK(ncclCommInitRank(&comm, 1, id, 0));
    for (int i = 0; i < 1000; i++) /* warm up */
        CHECK(ncclAllReduce((void *)buf, (void *)buf, 256, ncclFloat32, ncclSum, comm, st));
    CHECK(cuStreamSynchronize(st));
    t0 = now_us();
    for (int i = 0; i < calls; i++)
        CHECK(ncclAllReduce((void *)buf, (void *)buf, 256, ncclFloat32, ncclSum, comm, st));
    t_enqueue = now_us() - t0;
    t0 = now_us();
    CHECK(cuStreamSynchronize(st));
    t_sync = now_us() - t0;
    t0 = now_us();
    for (int i = 0; i < polls; i++)
        CHECK(ncclCommGetAsyncError(comm, &e));
    t_poll = now_us() - t0;
    for (int i = 0; i < 2000; i++) {
        t0 = now_us();
        CHECK(ncclAllReduce((void *)buf, (void *)buf, 2, ncclFloat32, ncclSum, comm, st));
        CHECK(cuStreamSynchronize(st));
        lat[i] = now_us() - t0;
    }
    for (int i = 1; i < 2000; i++) /* insertion sort: the median */
        for (int j = i; j > 0 && lat[j] < lat[j - 1]; j--) {
            double x = lat[j];
            lat[j] = lat[j - 1], lat[j - 1] = x;
        }
    CHECK(ncclCommDestroy(comm));
    /* pipeline: the calls and their drain, per call: what the worker's per-call path allows
     * back to back (through rgpu the worker runs each call after the application sent it). */
    printf("{\"nccl_version\": %d, \"calls\": %d, \"allreduce_call_us\": %.3f, "
           "\"drain_after_us\": %.1f, \"pipeline_us\": %.3f, \"async_error_poll_us\": %.2f, "
           "\"waited_8b_us\": %.2f, \"waited_8b_p10_us\": %.2f, \"waited_8b_p90_us\": %.2f}\n",
           version, calls, t_enqueue / calls, t_sync, (t_enqueue + t_sync) / calls, t_poll / polls,
           lat[1000], lat[200], lat[1800]);
    return 0;
}
