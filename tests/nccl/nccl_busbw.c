/* All-reduce bus bandwidth, one process per rank (device RANK of the session's devices), sizes
 * from 1 MiB to MAX_MIB doubling: algorithm bandwidth bytes/time, bus bandwidth algbw *
 * 2(n-1)/n, as NCCL's own tests define them. Rank 0 prints one JSON line per size. The same
 * binary runs natively and through rgpu (tests/gpu/nccl_two_gpu.sh).
 * Usage: nccl_busbw RANK NRANKS IDFILE [MAX_MIB (1024)] [ITERS (20)] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "nccl/nccl_abi.h"

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                           ncclComm_t, CUstream);

#define CHECK(x) do { if ((x) != 0) { fprintf(stderr, "rank %d: %s failed\n", rank, #x); return 1; } } while (0)

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int share_id(int rank, const char *path, ncclUniqueId *id)
{
    char tmp[4096];
    FILE *f;

    if (rank == 0) {
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        if (ncclGetUniqueId(id) != ncclSuccess || (f = fopen(tmp, "wb")) == NULL)
            return -1;
        fwrite(id, sizeof(*id), 1, f);
        fclose(f);
        return rename(tmp, path);
    }
    for (int i = 0; i < 1200; i++, usleep(50000))
        if ((f = fopen(path, "rb")) != NULL) {
            size_t got = fread(id, sizeof(*id), 1, f);
            fclose(f);
            if (got == 1)
                return 0;
        }
    return -1;
}

int main(int argc, char **argv)
{
    int rank = argc > 3 ? atoi(argv[1]) : 0, n = argc > 3 ? atoi(argv[2]) : 1, ndev = 0;
    size_t max = (size_t)(argc > 4 ? atoi(argv[4]) : 1024) << 20;
    int iters = argc > 5 ? atoi(argv[5]) : 20;
    ncclUniqueId id;
    ncclComm_t comm;
    CUcontext ctx;
    CUdevice dev;
    CUstream st;
    CUdeviceptr buf;

    if (argc < 4) {
        fprintf(stderr, "usage: nccl_busbw RANK NRANKS IDFILE [MAX_MIB] [ITERS]\n");
        return 2;
    }
    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&ndev));
    CHECK(cuDeviceGet(&dev, rank % ndev));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&buf, max));
    CHECK(cuMemsetD32(buf, 0, max / 4));
    CHECK(share_id(rank, argv[3], &id));
    CHECK(ncclCommInitRank(&comm, n, id, rank));
    for (size_t bytes = 1u << 20; bytes <= max; bytes *= 2) {
        double t0, t;

        for (int i = 0; i < 5; i++)
            CHECK(ncclAllReduce((void *)buf, (void *)buf, bytes / 4, ncclFloat32, ncclSum, comm, st));
        CHECK(cuStreamSynchronize(st));
        t0 = now_s();
        for (int i = 0; i < iters; i++)
            CHECK(ncclAllReduce((void *)buf, (void *)buf, bytes / 4, ncclFloat32, ncclSum, comm, st));
        CHECK(cuStreamSynchronize(st));
        t = (now_s() - t0) / iters;
        if (rank == 0)
            printf("{\"bytes\": %zu, \"time_us\": %.1f, \"algbw_gbs\": %.2f, \"busbw_gbs\": %.2f}\n",
                   bytes, t * 1e6, (double)bytes / t / 1e9,
                   (double)bytes / t / 1e9 * 2.0 * (n - 1) / (n > 1 ? n : 1));
    }
    CHECK(ncclCommDestroy(comm));
    return 0;
}
