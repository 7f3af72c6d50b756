/* All-reduce bus bandwidth, one process per rank (device RANK of the session's devices), sizes
 * from 1 MiB to MAX_MIB doubling: algorithm bandwidth bytes/time, bus bandwidth algbw *
 * 2(n-1)/n, as NCCL's own tests define them. Rank 0 prints one JSON line per size. The same
 * binary runs natively and through rgpu (tests/gpu/nccl_two_gpu.sh, dist.sh).
 * Usage: nccl_busbw RANK NRANKS IDFILE [MAX_MIB (1024)] [ITERS (20)]
 * Environment: NCCL_BUSBW_MIN smallest size in bytes (default 1 MiB), NCCL_BUSBW_STEP factor
 * between sizes (2), NCCL_BUSBW_REPS timed repetitions per size (1; the line then gives the
 * median and the spread of the repetitions' bus bandwidths; small sizes repeat the call so that
 * a repetition moves at least 64 MiB or makes 1000 calls), NCCL_BUSBW_LAT=1 also the latency of
 * an 8-byte all-reduce waited for each time (all-reduce + cuStreamSynchronize; median of 300). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "nccl/nccl_abi.h"

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                           CUstream);

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        if ((x) != 0) {                                                                            \
            fprintf(stderr, "rank %d: %s failed\n", rank, #x);                                     \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

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
    const char *e_min = getenv("NCCL_BUSBW_MIN"), *e_step = getenv("NCCL_BUSBW_STEP");
    const char *e_reps = getenv("NCCL_BUSBW_REPS"), *e_lat = getenv("NCCL_BUSBW_LAT");
    size_t min = e_min != NULL ? (size_t)atoll(e_min) : (1u << 20);
    int step = e_step != NULL && atoi(e_step) > 1 ? atoi(e_step) : 2;
    int reps = e_reps != NULL && atoi(e_reps) > 0 ? atoi(e_reps) : 1;
    double factor = 2.0 * (n - 1) / (n > 1 ? n : 1), t_rep[64];

    if (reps > 64)
        reps = 64;
    if (e_lat != NULL && atoi(e_lat) == 1) {
        double lat[300];

        for (int i = 0; i < 20; i++)
            CHECK(ncclAllReduce((void *)buf, (void *)buf, 2, ncclFloat32, ncclSum, comm, st));
        CHECK(cuStreamSynchronize(st));
        for (int i = 0; i < 300; i++) {
            double t0 = now_s();

            CHECK(ncclAllReduce((void *)buf, (void *)buf, 2, ncclFloat32, ncclSum, comm, st));
            CHECK(cuStreamSynchronize(st));
            lat[i] = (now_s() - t0) * 1e6;
        }
        qsort(lat, 300, sizeof(double), cmp_double);
        if (rank == 0)
            printf("{\"latency_8b_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f}\n", lat[150],
                   lat[30], lat[270]);
    }
    for (size_t bytes = min < 4 ? 4 : min; bytes <= max; bytes *= (size_t)step) {
        size_t count = bytes / 4;
        int it = iters;

        if (reps > 1 && (size_t)it * bytes < (64u << 20))
            it = (int)((64u << 20) / bytes) < 1000 ? (int)((64u << 20) / bytes) : 1000;
        for (int i = 0; i < 5; i++)
            CHECK(ncclAllReduce((void *)buf, (void *)buf, count, ncclFloat32, ncclSum, comm, st));
        CHECK(cuStreamSynchronize(st));
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();

            for (int i = 0; i < it; i++)
                CHECK(
                    ncclAllReduce((void *)buf, (void *)buf, count, ncclFloat32, ncclSum, comm, st));
            CHECK(cuStreamSynchronize(st));
            t_rep[r] = (now_s() - t0) / it;
        }
        qsort(t_rep, (size_t)reps, sizeof(double), cmp_double);
        double t = t_rep[reps / 2], fast = t_rep[0], slow = t_rep[reps - 1];

        if (rank == 0)
            printf("{\"bytes\": %zu, \"time_us\": %.2f, \"algbw_gbs\": %.3f, \"busbw_gbs\": %.3f, "
                   "\"busbw_min\": %.3f, \"busbw_max\": %.3f, \"iters\": %d, \"reps\": %d}\n",
                   bytes, t * 1e6, (double)bytes / t / 1e9, (double)bytes / t / 1e9 * factor,
                   (double)bytes / slow / 1e9 * factor, (double)bytes / fast / 1e9 * factor, it,
                   reps);
        fflush(stdout);
    }
    CHECK(ncclCommDestroy(comm));
    return 0;
}
