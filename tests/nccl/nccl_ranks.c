/* One rank of an NCCL job through rgpu: links libnccl.so.2 (the shim) and libcuda.so.1 (the
 * client) as an application would. Rank 0 makes the unique id and writes it to IDFILE; the
 * others read it. Modes:
 *   all    every collective, grouped send/recv, split, PreMulSum, ncclMemAlloc, checked values
 *   die    rank 1 exits abruptly after init; rank 0's all-reduce must fail, not hang
 *   hang   rank 1 stays alive but never calls; rank 0 must fail after the worker's nccl_timeout
 *          (NCCL_RANKS_GROUPED=1: rank 0 waits in a grouped send/recv instead of an all-reduce)
 *   join   rank 0 writes an id; rank 1 (another tenant) joining with it must be refused
 *   forge  (one process) an id with its MAC changed must be refused
 *   quota  (one process) a communicator that does not fit the quota must fail
 *   realid (one process) against a worker running a real NCCL (no GPU needed for this):
 *          its version, and a unique id with NCCL's bytes and the worker's MAC
 *   single (one process) ncclCommInitAll over one device; ncclCommInitRankConfig whose config
 *          reaches the worker's NCCL (minCTAs > maxCTAs refused there, a good one accepted);
 *          rgpuNcclCall refuses calls the op table does not allow
 *   more   NCCL 2.28's further calls: windows (a handle the worker did not give refused),
 *          ncclGroupSimulateEnd, ncclCommShrink (rank 0 alone), ncclCommRevoke, the device API's
 *          teams and requirements, ncclCommInitRankScalable, a non-blocking config
 *   old    (one process) against an NCCL before 2.28: its missing calls answer ncclInvalidUsage
 *   devices (one process, two devices of one server) ranks of one communicator in one process:
 *          a thread per device, each a blocking ncclCommInitRank (as XLA makes its cliques), then
 *          grouped collectives over both from one thread (as DataParallel runs them), then
 *          ncclCommInitAll over both devices
 *   cupy   (one process, two devices) CuPy's order: ncclCommInitAll and a grouped all-reduce
 *          first, then a blocking init per device thread (device 0's thread with no current
 *          context, as CuPy leaves it: the runtime's default device) and a grouped broadcast
 *   killmid rank 1 is killed inside an all-reduce (its worker's NCCL does not notice dead peers,
 *          FAKENCCL_BLIND); rank 0's next all-reduce must fail, not hang (NCCL_RANKS_DEAD: the
 *          file that appears once rank 1 is dead)
 *   devwait (one process, two devices; FAKENCCL_ASYNC) as XLA drives a clique: a thread per
 *          device, each its own group of one all-reduce, then waits for its device (a stream
 *          synchronization, an event's, a device-to-host copy); device 1's thread starts late,
 *          so device 0's wait comes before the peer's collective is sent: it must not hold the
 *          session (nor the worker) so that the peer's can still go out
 *   killloop (FAKENCCL_ASYNC, FAKENCCL_BLIND) ranks all-reduce in a loop, each collective waited
 *          for with cuCtxSynchronize and followed by ncclCommGetAsyncError (as PyTorch's loop
 *          and watchdog); rank 1 exits abruptly at step 30; rank 0, blocked in the
 *          synchronization of a collective that waits for the dead rank, must fail (exit 0
 *          after printing "rank 0: failed"), not hang
 *   lazy   (one process) NCCL memory allocated after creation (FAKENCCL_LAZY_BYTES) is charged:
 *          argv[4] bytes held first; NCCL_RANKS_EXPECT_OVER=1: the all-reduce must fail
 *   ppermute (one process, NRANKS devices of one server; FAKENCCL_ASYNC) XLA's collective-permute
 *          (tests/nccl/ppermute.c): communicators made in one group from one thread (mode
 *          ppermute-threads: each by a blocking init on a thread of its own; ppermute-split:
 *          split so from communicators made so), then a
 *          thread per device, each its own group of a send to the next device and a receive
 *          from the previous one, twice; the first exchange connects the pairs (it hung before
 *          the worker connected them at creation: issue 29)
 * Prints "rank R: ok" and exits 0 when every check passed. */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "client/rgpu_ext.h"
#include "nccl/nccl_abi.h"
#include "nccl/nccl_wire.h"
#include "proto/ops.h"
#include "tests/nccl/ppermute.h"

/* The shim's entry points (the application's view; the ABI header declares only types). */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclGetVersion(int *v);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e);
ncclResult_t ncclCommCount(ncclComm_t comm, int *n);
ncclResult_t ncclCommUserRank(ncclComm_t comm, int *r);
ncclResult_t ncclCommCuDevice(ncclComm_t comm, int *d);
ncclResult_t ncclAllReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                           CUstream);
ncclResult_t ncclBroadcast(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
ncclResult_t ncclReduce(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                        CUstream);
ncclResult_t ncclAllGather(const void *, void *, size_t, ncclDataType_t, ncclComm_t, CUstream);
ncclResult_t ncclReduceScatter(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, CUstream);
ncclResult_t ncclSend(const void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
ncclResult_t ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclMemAlloc(void **p, size_t n);
ncclResult_t ncclMemFree(void *p);
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *, void *, ncclDataType_t, ncclScalarResidence_t,
                                      ncclComm_t);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t, ncclComm_t);
ncclResult_t ncclCommRegister(ncclComm_t, void *, size_t, void **);
ncclResult_t ncclCommDeregister(ncclComm_t, void *);
ncclResult_t ncclBcast(void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
ncclResult_t ncclAlltoAll(const void *, void *, size_t, ncclDataType_t, ncclComm_t, CUstream);
ncclResult_t ncclGather(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
ncclResult_t ncclScatter(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *info);
ncclResult_t ncclCommWindowRegister(ncclComm_t, void *, size_t, ncclWindow_t *, int);
ncclResult_t ncclCommWindowDeregister(ncclComm_t, ncclWindow_t);
ncclResult_t ncclCommShrink(ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int);
ncclResult_t ncclCommRevoke(ncclComm_t, int);
ncclResult_t ncclCommInitRankScalable(ncclComm_t *, int, int, int, ncclUniqueId *, ncclConfig_t *);
ncclTeam_t ncclTeamWorld(ncclComm_t);
ncclTeam_t ncclTeamLsa(ncclComm_t);
ncclTeam_t ncclTeamRail(ncclComm_t);
int ncclTeamRankToWorld(ncclComm_t, ncclTeam_t, int);
int ncclTeamRankToLsa(ncclComm_t, ncclTeam_t, int);
int ncclLLA2ACalcSlots(int, int);
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t, int, ncclLsaBarrierHandle_t *,
                                             ncclDevResourceRequirements_t *);
ncclResult_t ncclDevCommCreate(void);
const char *ncclGetLastError(ncclComm_t comm);
/* The client's export for the shim (client/rgpu_ext.h), called here directly. */
CUresult rgpuNcclCall(struct rgpu_nccl_call *c);

#define N 1024
static int rank, nranks, fails;
static CUstream st;

#define CU(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "rank %d: %s = %d\n", rank, #x, (int)r_);                              \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)
#define NC(x)                                                                                      \
    do {                                                                                           \
        ncclResult_t r_ = (x);                                                                     \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "rank %d: %s = %d (%s)\n", rank, #x, (int)r_, ncclGetLastError(NULL)); \
            exit(3);                                                                               \
        }                                                                                          \
    } while (0)
#define EXPECT(c, ...)                                                                             \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "rank %d: FAILED %s: ", rank, #c);                                     \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

static void id_share(const char *path, ncclUniqueId *id)
{
    char tmp[4096];
    FILE *f;

    if (rank == 0) {
        NC(ncclGetUniqueId(id));
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        if ((f = fopen(tmp, "wb")) == NULL || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f))
            exit(4);
        rename(tmp, path);
        return;
    }
    for (int i = 0; i < 600; i++) {
        if ((f = fopen(path, "rb")) != NULL) {
            size_t got = fread(id, sizeof(*id), 1, f);
            fclose(f);
            if (got == 1)
                return;
        }
        usleep(50000);
    }
    fprintf(stderr, "rank %d: no unique id in %s\n", rank, path);
    exit(4);
}

static CUdeviceptr dev_floats(const float *host, size_t n)
{
    CUdeviceptr d;

    CU(cuMemAlloc(&d, n * sizeof(float)));
    if (host != NULL)
        CU(cuMemcpyHtoD(d, host, n * sizeof(float)));
    return d;
}

static void read_floats(float *host, CUdeviceptr d, size_t n)
{
    CU(cuStreamSynchronize(st));
    CU(cuMemcpyDtoH(host, d, n * sizeof(float)));
}

static void collectives(ncclComm_t comm)
{
    static float in[N], out[8 * N];
    CUdeviceptr s = 0, r = 0, g = 0;
    float sum = 0, prod = 1;

    for (int i = 0; i < N; i++)
        in[i] = (float)(rank + 1) + (float)i;
    for (int q = 0; q < nranks; q++)
        sum += (float)(q + 1), prod *= (float)(q + 1);
    s = dev_floats(in, N);
    r = dev_floats(NULL, N);
    g = dev_floats(NULL, (size_t)nranks * N);
    NC(ncclAllReduce((void *)s, (void *)r, N, ncclFloat32, ncclSum, comm, st));
    read_floats(out, r, N);
    EXPECT(out[0] == sum && out[N - 1] == sum + (float)nranks * (N - 1), "allreduce sum %g",
           out[0]);
    NC(ncclAllReduce((void *)s, (void *)r, 1, ncclFloat32, ncclProd, comm, st));
    read_floats(out, r, 1);
    EXPECT(out[0] == prod, "allreduce prod %g want %g", out[0], prod);
    NC(ncclAllReduce((void *)s, (void *)r, 1, ncclFloat32, ncclMax, comm, st));
    read_floats(out, r, 1);
    EXPECT(out[0] == (float)nranks, "allreduce max %g", out[0]);
    NC(ncclBroadcast((void *)s, (void *)r, N, ncclFloat32, nranks - 1, comm, st));
    read_floats(out, r, N);
    EXPECT(out[0] == (float)nranks && out[5] == (float)nranks + 5, "broadcast %g", out[0]);
    CU(cuMemsetD32(r, 0, N));
    NC(ncclReduce((void *)s, (void *)r, N, ncclFloat32, ncclMin, 0, comm, st));
    read_floats(out, r, N);
    EXPECT(rank != 0 || out[3] == 4.0f, "reduce min at root %g", out[3]);
    EXPECT(rank == 0 || out[3] == 0.0f, "reduce wrote a non-root %g", out[3]);
    NC(ncclAllGather((void *)s, (void *)g, N, ncclFloat32, comm, st));
    read_floats(out, g, (size_t)nranks * N);
    for (int q = 0; q < nranks; q++)
        EXPECT(out[(size_t)q * N + 2] == (float)(q + 1) + 2, "allgather part %d: %g", q,
               out[(size_t)q * N + 2]);
    NC(ncclAllReduce((void *)s, (void *)g, N, ncclFloat32, ncclSum, comm, st)); /* g: all sums */
    NC(ncclReduceScatter((void *)g, (void *)r, N / nranks, ncclFloat32, ncclSum, comm, st));
    read_floats(out, r, 1);
    EXPECT(out[0] == (float)nranks * (sum + (float)(rank * (N / nranks)) * nranks),
           "reducescatter %g", out[0]);
    /* NCCL 2.28's: all-to-all (rank q's part p lands in p's slot q), gather and scatter */
    {
        static float parts[8 * N];
        size_t per = N / 8;

        for (int q = 0; q < nranks; q++)
            for (size_t i = 0; i < per; i++)
                parts[(size_t)q * per + i] = (float)(100 * rank + q);
        CU(cuMemcpyHtoD(g, parts, (size_t)nranks * per * sizeof(float)));
        NC(ncclAlltoAll((void *)g, (void *)r, per, ncclFloat32, comm, st));
        read_floats(out, r, (size_t)nranks * per);
        for (int q = 0; q < nranks; q++)
            EXPECT(out[(size_t)q * per + 1] == (float)(100 * q + rank), "alltoall from %d: %g", q,
                   out[(size_t)q * per + 1]);
        NC(ncclGather((void *)s, rank == 1 ? (void *)g : NULL, per, ncclFloat32, 1, comm, st));
        read_floats(out, g, (size_t)nranks * per);
        for (int q = 0; q < nranks && rank == 1; q++)
            EXPECT(out[(size_t)q * per + 3] == (float)(q + 1) + 3, "gather part %d: %g", q,
                   out[(size_t)q * per + 3]);
        if (rank == 0)
            CU(cuMemcpyHtoD(g, parts, (size_t)nranks * per * sizeof(float)));
        NC(ncclScatter(rank == 0 ? (void *)g : NULL, (void *)r, per, ncclFloat32, 0, comm, st));
        read_floats(out, r, per);
        EXPECT(out[0] == (float)rank, "scatter: %g", out[0]);
    }
    /* a ring exchange in one group: each sends to the next and receives from the previous */
    NC(ncclGroupStart());
    NC(ncclSend((void *)s, N, ncclFloat32, (rank + 1) % nranks, comm, st));
    NC(ncclRecv((void *)r, N, ncclFloat32, (rank + nranks - 1) % nranks, comm, st));
    NC(ncclGroupEnd());
    read_floats(out, r, N);
    EXPECT(out[1] == (float)((rank + nranks - 1) % nranks + 1) + 1, "ring recv %g", out[1]);
    {
        float half = 0.5f;
        ncclRedOp_t op;

        NC(ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32, ncclScalarHostImmediate, comm));
        NC(ncclAllReduce((void *)s, (void *)r, 1, ncclFloat32, op, comm, st));
        read_floats(out, r, 1);
        EXPECT(out[0] == sum * 0.5f, "premulsum %g", out[0]);
        NC(ncclRedOpDestroy(op, comm));
    }
    CU(cuMemFree(s));
    CU(cuMemFree(r));
    CU(cuMemFree(g));
}

static void mode_all(ncclComm_t comm)
{
    ncclComm_t half;
    ncclResult_t e;
    void *p = NULL;
    int v, n, me, dev;

    NC(ncclGetVersion(&v));
    printf("rank %d: NCCL version %d\n", rank, v);
    if (getenv("NCCL_RANKS_VERSION") != NULL &&
        *getenv("NCCL_RANKS_VERSION") != '\0') /* the worker's NCCL answers, not the shim */
        EXPECT(v == atoi(getenv("NCCL_RANKS_VERSION")), "version %d", v);
    NC(ncclCommCount(comm, &n));
    NC(ncclCommUserRank(comm, &me));
    NC(ncclCommCuDevice(comm, &dev));
    EXPECT(n == nranks && me == rank && dev == 0, "count %d rank %d dev %d", n, me, dev);
    collectives(comm);
    NC(ncclCommSplit(comm, rank % 2, -rank, &half, NULL)); /* reversed order by key */
    NC(ncclCommCount(half, &n));
    NC(ncclCommUserRank(half, &me));
    EXPECT(n == (nranks + 1 - rank % 2) / 2, "split count %d", n);
    EXPECT(me == n - 1 - rank / 2, "split rank %d", me);
    NC(ncclCommDestroy(half));
    NC(ncclMemAlloc(&p, 1 << 20));
    CU(cuMemsetD8((CUdeviceptr)p, 7, 1 << 20));
    {
        unsigned type = 0;
        unsigned char b[2] = {0};

        CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p));
        EXPECT(type == CU_MEMORYTYPE_DEVICE, "ncclMemAlloc memory is of type %u", type);
        CU(cuMemcpy((CUdeviceptr)b, (CUdeviceptr)p + 5, 2)); /* direction inferred: DtoH */
        EXPECT(b[0] == 7 && b[1] == 7, "cuMemcpy from NCCL memory: %d", b[0]);
    }
    {
        void *handle = NULL;
        unsigned char b[4] = {0};

        NC(ncclCommRegister(comm, p, 1 << 20, &handle));
        if (rank == 0)
            CU(cuMemsetD8((CUdeviceptr)p, 9, 4));
        NC(ncclBcast(p, 4, ncclUint8, 0, comm, st)); /* in place, from rank 0 */
        CU(cuStreamSynchronize(st));
        CU(cuMemcpyDtoH(b, (CUdeviceptr)p, 4));
        EXPECT(b[0] == 9 && b[3] == 9, "bcast into NCCL memory: %d", b[0]);
        NC(ncclCommDeregister(comm, handle));
    }
    NC(ncclMemFree(p));
    NC(ncclCommGetAsyncError(comm, &e));
    EXPECT(e == ncclSuccess, "async error %d", (int)e);
    NC(ncclCommFinalize(comm));
    NC(ncclCommDestroy(comm));
}

/* A peer is gone: the all-reduce must end with an error within `limit` seconds. */
static void expect_failure(ncclComm_t comm, int limit, ncclResult_t want)
{
    CUdeviceptr s = dev_floats(NULL, N);
    time_t t0 = time(NULL);
    ncclResult_t e = ncclSuccess;

    if (getenv("NCCL_RANKS_GROUPED") != NULL) { /* the wait is in ncclGroupEnd */
        NC(ncclGroupStart());
        NC(ncclSend((void *)s, N, ncclFloat32, 1, comm, st));
        NC(ncclRecv((void *)s, N, ncclFloat32, 1, comm, st));
        NC(ncclGroupEnd());
    } else
        NC(ncclAllReduce((void *)s, (void *)s, N, ncclFloat32, ncclSum, comm, st));
    CU(cuStreamSynchronize(st)); /* returns: the worker aborted the communicator */
    NC(ncclCommGetAsyncError(comm, &e));
    EXPECT(e == want, "async error %d, want %d", (int)e, (int)want);
    EXPECT(time(NULL) - t0 <= limit, "took %ld s", (long)(time(NULL) - t0));
    EXPECT(ncclAllReduce((void *)s, (void *)s, N, ncclFloat32, ncclSum, comm, st) == ncclSuccess,
           "a later collective is still accepted (its error is the sticky one)");
    NC(ncclCommAbort(comm));
}

/* The client's generic forwarder (client/api/nccl_ext.c) checks each call against the op table
 * before it is sent: an op that is not an NCCL one, too few or too many argument words (too few
 * would end the session at the worker), NOREPLY for an op that answers, and a stream argument
 * for an op without one are refused with INVALID_VALUE; the session goes on. */
static void forwarder_checks(void)
{
    const struct rgpu_nccl_call ok = {
        .size = sizeof(ok), .op = PROTO_OP_NCCL_GET_VERSION, .stream_arg = ~0u};
    struct rgpu_nccl_call c[5] = {ok, ok, ok, ok, ok};
    const char *what[5] = {"a CUDA op", "too few words", "too many words", "async with a reply",
                           "a stream for an op without"};

    c[0].op = PROTO_OP_MEM_ALLOC, c[0].nargs = 1, c[0].args[0] = 4096;
    c[1].op = PROTO_OP_NCCL_MEM_ALLOC, c[1].nargs = 0;
    c[2].op = PROTO_OP_NCCL_MEM_ALLOC, c[2].nargs = 2, c[2].args[0] = 4096;
    c[3].op = PROTO_OP_NCCL_MEM_ALLOC, c[3].nargs = 1, c[3].args[0] = 4096, c[3].async = 1;
    c[4].op = PROTO_OP_NCCL_ASYNC_ERROR, c[4].nargs = 1, c[4].stream_arg = 0;
    for (int i = 0; i < 5; i++)
        EXPECT(rgpuNcclCall(&c[i]) == CUDA_ERROR_INVALID_VALUE, "%s: not refused", what[i]);
    c[0] = ok;
    EXPECT(rgpuNcclCall(&c[0]) == CUDA_SUCCESS && c[0].nout >= 2 && c[0].out[0] == 0,
           "NCCL_GET_VERSION after the refusals: %u values, result %llu", c[0].nout,
           (unsigned long long)c[0].out[0]);
}

/* NCCL 2.28's further calls, on a communicator of every rank. */
static void mode_more(ncclComm_t comm, ncclUniqueId *id)
{
    ncclSimInfo_t sim = {sizeof(sim), NCCL_SIM_INFO_MAGIC, NCCL_ABI_VERSION(2, 28, 0), -1.0f};
    CUdeviceptr buf = dev_floats(NULL, N);
    ncclWindow_t win = NULL;
    ncclComm_t small = NULL, scal = NULL;
    ncclTeam_t t;
    ncclUniqueId two[2];
    ncclLsaBarrierHandle_t bh;
    ncclDevResourceRequirements_t req;
    float one[N], out[N];
    ncclResult_t e;

    /* a window: collective; its handle comes back; one the worker did not give is refused */
    NC(ncclCommWindowRegister(comm, (void *)buf, N * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC));
    EXPECT(win != NULL, "no window handle");
    EXPECT(ncclCommWindowDeregister(comm, (ncclWindow_t)((uintptr_t)win + 64)) ==
               ncclInvalidArgument,
           "a forged window handle was not refused");
    NC(ncclCommWindowDeregister(comm, win));
    /* a simulated group: nothing runs, an estimate comes back */
    for (int i = 0; i < N; i++)
        one[i] = 1.0f;
    CU(cuMemcpyHtoD(buf, one, sizeof(one)));
    NC(ncclGroupStart());
    NC(ncclAllReduce((void *)buf, (void *)buf, N, ncclFloat32, ncclSum, comm, st));
    NC(ncclGroupSimulateEnd(&sim));
    EXPECT(sim.estimatedTime == 10.0f, "simulated time %g", sim.estimatedTime);
    read_floats(out, buf, N);
    EXPECT(out[7] == 1.0f, "the simulated all-reduce ran: %g", out[7]);
    EXPECT(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "a simulate without a group");
    /* an empty group is simulated by a worker too (0), and an inner end only counts */
    sim.estimatedTime = -1.0f;
    NC(ncclGroupStart());
    NC(ncclGroupSimulateEnd(&sim));
    EXPECT(sim.estimatedTime == 0.0f, "simulated time of an empty group %g", sim.estimatedTime);
    NC(ncclGroupStart());
    NC(ncclGroupStart());
    NC(ncclAllReduce((void *)buf, (void *)buf, N, ncclFloat32, ncclSum, comm, st));
    NC(ncclGroupEnd());
    NC(ncclGroupSimulateEnd(&sim));
    EXPECT(sim.estimatedTime == 10.0f, "simulated time of a nested group %g", sim.estimatedTime);
    /* teams of the device API, and a requirement's arithmetic */
    t = ncclTeamWorld(comm);
    EXPECT(t.nRanks == nranks && t.rank == rank && t.stride == 1, "world team %d %d %d", t.nRanks,
           t.rank, t.stride);
    t = ncclTeamLsa(comm);
    EXPECT(t.nRanks == nranks && t.rank == rank, "lsa team %d %d", t.nRanks, t.rank);
    EXPECT(ncclTeamRankToLsa(comm, t, nranks - 1) == nranks - 1, "rank to lsa");
    EXPECT(ncclTeamRankToWorld(comm, ncclTeamRail(comm), 0) == rank, "rank to world");
    EXPECT(ncclLLA2ACalcSlots(10, 12) == 20, "LLA2A slots %d", ncclLLA2ACalcSlots(10, 12));
    NC(ncclLsaBarrierCreateRequirement(t, 2, &bh, &req));
    EXPECT(req.bufferSize == (6 + 2 * (size_t)nranks) * 4 && req.outBufferHandle == &bh.bufHandle,
           "lsa barrier requirement %zu", req.bufferSize);
    EXPECT(ncclDevCommCreate() == ncclInvalidUsage, "ncclDevCommCreate is a stub");
    /* scalable init with two ids (rank 0 makes both), non-blocking: ncclInProgress, then polled */
    id_share(getenv("NCCL_RANKS_IDFILE2"), &two[0]);
    id_share(getenv("NCCL_RANKS_IDFILE3"), &two[1]);
    {
        ncclConfig_t nb = {.size = sizeof(ncclConfig_t),
                           .magic = NCCL_CONFIG_MAGIC,
                           .version = NCCL_ABI_VERSION(2, 28, 0),
                           .blocking = 0,
                           .cgaClusterSize = NCCL_CONFIG_UNDEF_INT,
                           .minCTAs = NCCL_CONFIG_UNDEF_INT,
                           .maxCTAs = NCCL_CONFIG_UNDEF_INT,
                           .splitShare = NCCL_CONFIG_UNDEF_INT};
        ncclResult_t r = ncclCommInitRankScalable(&scal, nranks, rank, 2, two, &nb);
        int polls = 0;

        EXPECT(r == ncclInProgress || r == ncclSuccess, "scalable init %d", (int)r);
        do
            NC(ncclCommGetAsyncError(scal, &e));
        while (e == ncclInProgress && ++polls < 100000 && usleep(100) == 0);
        EXPECT(e == ncclSuccess, "scalable init ended with %d", (int)e);
        CU(cuMemcpyHtoD(buf, one, sizeof(one)));
        NC(ncclAllReduce((void *)buf, (void *)buf, N, ncclFloat32, ncclSum, scal, st));
        read_floats(out, buf, N);
        EXPECT(out[5] == (float)nranks, "all-reduce on the scalable communicator %g", out[5]);
        NC(ncclCommDestroy(scal));
    }
    /* revoke: later collectives fail */
    NC(ncclCommSplit(comm, 0, rank, &small, NULL));
    NC(ncclCommRevoke(small, 0));
    NC(ncclAllReduce((void *)buf, (void *)buf, N, ncclFloat32, ncclSum, small, st));
    CU(cuStreamSynchronize(st));
    NC(ncclCommGetAsyncError(small, &e));
    EXPECT(e == ncclInvalidUsage, "a collective after revoke: %d", (int)e);
    NC(ncclCommAbort(small));
    /* shrink: rank 0 alone (the others leave) */
    if (rank == 0) {
        int ex[8], n = 0;

        for (int q = 1; q < nranks; q++)
            ex[n++] = q;
        NC(ncclCommShrink(comm, ex, n, &small, NULL, NCCL_SHRINK_DEFAULT));
        NC(ncclCommCount(small, &n));
        EXPECT(n == 1, "shrunk to %d ranks", n);
        CU(cuMemcpyHtoD(buf, one, sizeof(one)));
        NC(ncclAllReduce((void *)buf, (void *)buf, N, ncclFloat32, ncclSum, small, st));
        read_floats(out, buf, N);
        EXPECT(out[0] == 1.0f, "all-reduce alone %g", out[0]);
        NC(ncclCommDestroy(small));
    }
    NC(ncclCommDestroy(comm));
    CU(cuMemFree(buf));
    (void)id;
}

/* Against an NCCL before 2.28 (the worker's dlsym finds none of these). */
static void mode_old(void)
{
    ncclSimInfo_t sim = {sizeof(sim), NCCL_SIM_INFO_MAGIC, NCCL_ABI_VERSION(2, 28, 0), -1.0f};
    CUdeviceptr d = dev_floats(NULL, 4);
    ncclWindow_t win;
    ncclUniqueId id;
    ncclComm_t comm, small;
    ncclResult_t e;

    NC(ncclGetUniqueId(&id));
    NC(ncclCommInitRank(&comm, 1, id, 0));
    EXPECT(ncclAlltoAll((void *)d, (void *)d, 1, ncclFloat32, comm, st) == ncclInvalidUsage,
           "ncclAlltoAll offered");
    EXPECT(ncclGather((void *)d, (void *)d, 1, ncclFloat32, 0, comm, st) == ncclInvalidUsage,
           "ncclGather offered");
    EXPECT(ncclCommWindowRegister(comm, (void *)d, 16, &win, 0) == ncclInvalidUsage,
           "windows offered");
    EXPECT(ncclCommShrink(comm, NULL, 0, &small, NULL, 0) == ncclInvalidUsage, "shrink offered");
    NC(ncclGroupStart());
    EXPECT(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "simulate offered");
    NC(ncclGroupEnd());
    NC(ncclAllReduce((void *)d, (void *)d, 4, ncclFloat32, ncclSum, comm, st)); /* still fine */
    CU(cuStreamSynchronize(st));
    NC(ncclCommGetAsyncError(comm, &e));
    EXPECT(e == ncclSuccess, "async error %d", (int)e);
    NC(ncclCommDestroy(comm));
}

/* Ranks of one communicator on two devices of this process. */
struct dev_rank {
    int dev;
    ncclUniqueId id;
    ncclComm_t comm;
    ncclResult_t res;
    CUcontext ctx;
    bool bare; /* its thread sets no context (as CuPy's for device 0: the runtime's default) */
    pthread_t thread;
};

static void *dev_init(void *arg)
{
    struct dev_rank *d = arg;

    if (!d->bare && cuCtxSetCurrent(d->ctx) != CUDA_SUCCESS)
        d->res = ncclUnhandledCudaError;
    else
        d->res = ncclCommInitRank(&d->comm, 2, d->id, d->dev);
    return NULL;
}

struct dev_pair {
    struct dev_rank d[2];
    CUstream s[2];
    CUdeviceptr b[2];
};

static void devices_setup(struct dev_pair *p)
{
    float in[N];

    for (int i = 0; i < 2; i++) { /* contexts on both devices first, as XLA makes them */
        CUdevice dev;

        p->d[i] = (struct dev_rank){.dev = i};
        CU(cuDeviceGet(&dev, i));
        CU(cuDevicePrimaryCtxRetain(&p->d[i].ctx, dev));
        CU(cuCtxSetCurrent(p->d[i].ctx));
        CU(cuStreamCreate(&p->s[i], CU_STREAM_NON_BLOCKING));
        for (int k = 0; k < N; k++)
            in[k] = (float)(i + 1);
        p->b[i] = dev_floats(in, N);
    }
}

/* Both devices' collective in one group from this thread (as DataParallel and CuPy run them),
 * then element `at` of each device's buffer must be `want`. */
static void devices_grouped(struct dev_pair *p, ncclComm_t comms[2], bool bcast, int at, float want)
{
    float out[N];

    NC(ncclGroupStart());
    for (int i = 0; i < 2; i++) {
        CU(cuCtxSetCurrent(p->d[i].ctx));
        if (bcast)
            NC(ncclBroadcast((void *)p->b[i], (void *)p->b[i], N, ncclFloat32, 1, comms[i],
                             p->s[i]));
        else
            NC(ncclAllReduce((void *)p->b[i], (void *)p->b[i], N, ncclFloat32, ncclSum, comms[i],
                             p->s[i]));
    }
    NC(ncclGroupEnd());
    for (int i = 0; i < 2; i++) {
        CU(cuCtxSetCurrent(p->d[i].ctx));
        CU(cuStreamSynchronize(p->s[i]));
        CU(cuMemcpyDtoH(out, p->b[i], sizeof(out)));
        EXPECT(out[at] == want, "grouped %s on device %d: %g", bcast ? "broadcast" : "all-reduce",
               i, out[at]);
    }
}

/* XLA (and CuPy's NcclCommunicator per thread): one thread per device, each a blocking init;
 * rank 0's waits for rank 1's. Then a grouped collective over both; the communicators destroyed. */
static void devices_threads(struct dev_pair *p, bool bcast, int at, float want)
{
    ncclComm_t comms[2];
    ncclUniqueId id;
    int n, r, dv;

    NC(ncclGetUniqueId(&id));
    for (int i = 0; i < 2; i++)
        p->d[i].id = id;
    for (int i = 0; i < 2; i++)
        if (pthread_create(&p->d[i].thread, NULL, dev_init, &p->d[i]) != 0)
            exit(5);
    for (int i = 0; i < 2; i++) {
        pthread_join(p->d[i].thread, NULL);
        EXPECT(p->d[i].res == ncclSuccess, "thread init on device %d: %d", i, (int)p->d[i].res);
    }
    if (p->d[0].res != ncclSuccess || p->d[1].res != ncclSuccess)
        return;
    for (int i = 0; i < 2; i++) {
        comms[i] = p->d[i].comm;
        NC(ncclCommCount(comms[i], &n));
        NC(ncclCommUserRank(comms[i], &r));
        NC(ncclCommCuDevice(comms[i], &dv));
        EXPECT(n == 2 && r == i && dv == i, "device %d: count %d rank %d device %d", i, n, r, dv);
    }
    devices_grouped(p, comms, bcast, at, want);
    for (int i = 0; i < 2; i++)
        NC(ncclCommDestroy(comms[i]));
}

/* ncclCommInitAll over both devices, then a grouped collective over them. */
static void devices_initall(struct dev_pair *p, bool bcast, int at, float want)
{
    ncclComm_t all[2];
    int r;

    NC(ncclCommInitAll(all, 2, NULL));
    devices_grouped(p, all, bcast, at, want);
    for (int i = 0; i < 2; i++) {
        NC(ncclCommUserRank(all[i], &r));
        EXPECT(r == i, "InitAll rank %d on device %d", r, i);
        NC(ncclCommDestroy(all[i]));
    }
}

/* devices: XLA's cliques, then DataParallel's grouped all-reduce, then ncclCommInitAll. */
static void mode_devices(void)
{
    struct dev_pair p;

    devices_setup(&p);
    devices_threads(&p, false, 9, 3.0f);
    devices_initall(&p, true, 0, 3.0f);
}

/* cupy: CuPy's order (tests/gpu/dist_cupy.py): NcclCommunicator.initAll and a grouped
 * all-reduce first, then a blocking NcclCommunicator per device thread and a grouped broadcast. */
static void mode_devices_cupy(void)
{
    struct dev_pair p;

    devices_setup(&p);
    devices_initall(&p, false, 9, 3.0f);
    p.d[0].bare = true;
    devices_threads(&p, true, 0, 3.0f);
}

/* devwait: one thread per device, as XLA's: each its own group of one all-reduce, then
 * ncclCommGetAsyncError (as XLA asks after every group), then a wait for its device; device 1
 * sends its first collective 300 ms after device 0. */
struct dev_waiter {
    int dev;
    ncclComm_t comm;
    CUcontext ctx;
    CUstream s;
    CUdeviceptr b;
    int bad;
    pthread_t thread;
};

static void *dev_wait_main(void *arg)
{
    struct dev_waiter *w = arg;
    float in[N], out[N];
    CUevent ev;
    ncclResult_t e;

    if (cuCtxSetCurrent(w->ctx) != CUDA_SUCCESS || cuEventCreate(&ev, 0) != CUDA_SUCCESS) {
        w->bad++;
        return NULL;
    }
    for (int k = 0; k < N; k++)
        in[k] = (float)(w->dev + 1);
    for (int it = 0; it < 6; it++) {
        if (w->dev == 1 && it == 0)
            usleep(300 * 1000); /* device 0 waits before this device's collective is sent */
        if (cuMemcpyHtoD(w->b, in, sizeof(in)) != CUDA_SUCCESS || ncclGroupStart() != ncclSuccess ||
            ncclAllReduce((void *)w->b, (void *)w->b, N, ncclFloat32, ncclSum, w->comm, w->s) !=
                ncclSuccess ||
            ncclGroupEnd() != ncclSuccess || ncclCommGetAsyncError(w->comm, &e) != ncclSuccess ||
            e != ncclSuccess) {
            w->bad++;
            break;
        }
        CUresult r = it % 3 == 0 ? cuStreamSynchronize(w->s)
                     : it % 3 == 1
                         ? (cuEventRecord(ev, w->s) == CUDA_SUCCESS ? cuEventSynchronize(ev)
                                                                    : CUDA_ERROR_UNKNOWN)
                         : cuMemcpyDtoHAsync(out, w->b, sizeof(out), w->s);
        if (r == CUDA_SUCCESS && it % 3 == 2)
            r = cuStreamSynchronize(w->s);
        else if (r == CUDA_SUCCESS)
            r = cuMemcpyDtoH(out, w->b, sizeof(out));
        if (r != CUDA_SUCCESS || out[7] != 3.0f) {
            fprintf(stderr, "device %d step %d: %d, %g\n", w->dev, it, (int)r, out[7]);
            w->bad++;
        }
    }
    cuEventDestroy(ev);
    return NULL;
}

static void mode_devwait(void)
{
    struct dev_waiter w[2];
    ncclComm_t all[2];

    for (int i = 0; i < 2; i++) {
        CUdevice dev;

        w[i] = (struct dev_waiter){.dev = i};
        CU(cuDeviceGet(&dev, i));
        CU(cuDevicePrimaryCtxRetain(&w[i].ctx, dev));
        CU(cuCtxSetCurrent(w[i].ctx));
        CU(cuStreamCreate(&w[i].s, CU_STREAM_NON_BLOCKING));
        w[i].b = dev_floats(NULL, N);
    }
    NC(ncclCommInitAll(all, 2, NULL));
    for (int i = 0; i < 2; i++) {
        w[i].comm = all[i];
        if (pthread_create(&w[i].thread, NULL, dev_wait_main, &w[i]) != 0)
            exit(5);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(w[i].thread, NULL);
        EXPECT(w[i].bad == 0, "device %d: %d step(s) wrong", i, w[i].bad);
    }
    for (int i = 0; i < 2; i++)
        NC(ncclCommDestroy(all[i]));
}

/* killloop: rank 1 dies at step 30; rank 0 must see an error, not wait for ever. */
static void mode_killloop(ncclComm_t comm)
{
    CUdeviceptr b = dev_floats(NULL, N);
    ncclResult_t e = ncclSuccess;

    for (int step = 0; step < 100000; step++) {
        if (rank == 1 && step == 30)
            _exit(9); /* no goodbye, no destroy: as a killed process */
        if (ncclAllReduce((void *)b, (void *)b, N, ncclFloat32, ncclSum, comm, st) != ncclSuccess ||
            cuCtxSynchronize() != CUDA_SUCCESS || ncclCommGetAsyncError(comm, &e) != ncclSuccess ||
            e != ncclSuccess) {
            printf("rank %d: failed at step %d (async error %d)\n", rank, step, (int)e);
            EXPECT(rank == 0 && step >= 30, "a failure at step %d", step);
            return;
        }
    }
    EXPECT(0, "no failure in 100000 steps");
}

static void mode_single(void)
{
    ncclConfig_t bad = {.size = sizeof(ncclConfig_t),
                        .magic = NCCL_CONFIG_MAGIC,
                        .version = NCCL_ABI_VERSION(2, 28, 0),
                        .blocking = 1,
                        .cgaClusterSize = NCCL_CONFIG_UNDEF_INT,
                        .minCTAs = 4,
                        .maxCTAs = 2,
                        .splitShare = NCCL_CONFIG_UNDEF_INT},
                 good = bad;
    CUdeviceptr d = dev_floats(NULL, 4);
    float one[4] = {1, 1, 1, 1}, out[4];
    ncclUniqueId id;
    ncclComm_t comm;

    NC(ncclCommInitAll(&comm, 1, NULL));
    CU(cuMemcpyHtoD(d, one, sizeof(one)));
    NC(ncclAllReduce((void *)d, (void *)d, 4, ncclFloat32, ncclSum, comm, st));
    read_floats(out, d, 4);
    EXPECT(out[2] == 1.0f, "one-rank all-reduce %g", out[2]);
    NC(ncclCommDestroy(comm));
    NC(ncclGetUniqueId(&id));
    EXPECT(ncclCommInitRankConfig(&comm, 1, id, 0, &bad) == ncclInvalidArgument,
           "minCTAs > maxCTAs accepted: the config did not reach the worker's NCCL");
    good.minCTAs = 1;
    good.maxCTAs = 4;
    good.cgaClusterSize = 2;
    NC(ncclGetUniqueId(&id));
    NC(ncclCommInitRankConfig(&comm, 1, id, 0, &good));
    NC(ncclCommDestroy(comm));
    forwarder_checks();
}

int main(int argc, char **argv)
{
    const char *mode = argc > 4 ? argv[1] : "";
    ncclComm_t comm = NULL;
    ncclUniqueId id;
    CUcontext ctx;
    CUdevice dev;
    ncclResult_t res;

    if (argc < 5) {
        fprintf(stderr,
                "usage: nccl_ranks all|more|die|hang|killmid|join|forge|quota|lazy|single|"
                "old|devices|devwait|ppermute|ppermute-threads|ppermute-split|killloop|realid RANK "
                "NRANKS IDFILE\n");
        return 2;
    }
    rank = atoi(argv[2]);
    nranks = atoi(argv[3]);
    CU(cuInit(0));
    {
        int ndev = 1;

        CU(cuDeviceGetCount(&ndev));
        CU(cuDeviceGet(
            &dev, strcmp(mode, "killmid") == 0 || strcmp(mode, "killloop") == 0 ? rank % ndev : 0));
    }
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    if (strcmp(mode, "realid") == 0) {
        int v = 0, head = 0, tail = 0;

        NC(ncclGetVersion(&v));
        printf("rank 0: NCCL version %d\n", v);
        if (getenv("NCCL_RANKS_VERSION") != NULL && *getenv("NCCL_RANKS_VERSION") != '\0')
            EXPECT(v == atoi(getenv("NCCL_RANKS_VERSION")), "version %d", v);
        NC(ncclGetUniqueId(&id));
        for (int i = 0; i < 96; i++)
            head += id.internal[i] != 0;
        for (int i = 96; i < 128; i++)
            tail += id.internal[i] != 0;
        EXPECT(head > 0 && tail > 16, "id: %d nonzero NCCL bytes, %d nonzero MAC bytes", head,
               tail);
        if (v >= NCCL_ABI_VERSION(2, 28, 0)) { /* the worker found every entry point of 2.28 */
            struct rgpu_nccl_call c = {
                .size = sizeof(c), .op = PROTO_OP_NCCL_GET_VERSION, .stream_arg = ~0u};
            const unsigned long long all = 0x3ff;

            EXPECT(rgpuNcclCall(&c) == CUDA_SUCCESS && c.nout >= 3 && (c.out[2] & all) == all,
                   "NCCL %d: the worker's features %#llx, want %#llx", v,
                   c.nout >= 3 ? (unsigned long long)c.out[2] : 0ull, all);
        }
    } else if (strcmp(mode, "single") == 0) {
        mode_single();
    } else if (strcmp(mode, "old") == 0) {
        mode_old();
    } else if (strcmp(mode, "devices") == 0) {
        mode_devices();
    } else if (strcmp(mode, "cupy") == 0) {
        mode_devices_cupy();
    } else if (strcmp(mode, "devwait") == 0) {
        mode_devwait();
    } else if (strncmp(mode, "ppermute", 8) == 0) {
        enum ppermute_make how = strcmp(mode, "ppermute-threads") == 0 ? PPERMUTE_THREADS
                                 : strcmp(mode, "ppermute-split") == 0 ? PPERMUTE_SPLIT
                                                                       : PPERMUTE_GROUP;
        EXPECT(ppermute_run(nranks, how) == 0, "%s over %d devices", mode, nranks);
    } else if (strcmp(mode, "lazy") == 0) {
        CUdeviceptr hold, s1 = dev_floats(NULL, 32768), r1 = dev_floats(NULL, 32768);
        ncclResult_t e = ncclSuccess;

        if (atoi(argv[4]) > 0)
            CU(cuMemAlloc(&hold, (size_t)atoi(argv[4])));
        NC(ncclGetUniqueId(&id));
        NC(ncclCommInitRank(&comm, 1, id, 0));
        NC(ncclAllReduce((void *)s1, (void *)r1, 32768, ncclFloat32, ncclSum, comm, st));
        CU(cuStreamSynchronize(st));
        NC(ncclCommGetAsyncError(comm, &e));
        if (getenv("NCCL_RANKS_EXPECT_OVER") != NULL)
            EXPECT(e == ncclUnhandledCudaError, "NCCL's later memory over the quota: error %d",
                   (int)e);
        else
            EXPECT(e == ncclSuccess, "NCCL's later memory under the quota: error %d", (int)e);
        ncclCommAbort(comm);
    } else if (strcmp(mode, "forge") == 0 || strcmp(mode, "quota") == 0) {
        CUdeviceptr hold;

        NC(ncclGetUniqueId(&id));
        if (strcmp(mode, "forge") == 0)
            id.internal[120] ^= 1;
        else
            CU(cuMemAlloc(&hold, (size_t)atoi(argv[4]))); /* argv[4]: bytes to hold first */
        res = ncclCommInitRank(&comm, 1, id, 0);
        EXPECT(res == (strcmp(mode, "forge") == 0 ? ncclInvalidArgument : ncclUnhandledCudaError),
               "init gave %d", (int)res);
    } else if (strcmp(mode, "join") == 0) {
        id_share(argv[4], &id); /* rank 0 only makes the id */
        if (rank == 0) {
            printf("rank 0: ok\n");
            return 0;
        }
        res = ncclCommInitRank(&comm, nranks, id, rank);
        EXPECT(res == ncclInvalidArgument, "joining another tenant's job gave %d", (int)res);
    } else {
        id_share(argv[4], &id);
        NC(ncclCommInitRank(&comm, nranks, id, rank));
        if (strcmp(mode, "all") == 0)
            mode_all(comm);
        else if (strcmp(mode, "more") == 0)
            mode_more(comm, &id);
        else if (strcmp(mode, "killloop") == 0)
            mode_killloop(comm);
        else if (strcmp(mode, "killmid") == 0 && rank == 1) {
            CUdeviceptr s1 = dev_floats(NULL, N);

            /* Inside the all-reduce (its worker waits for rank 0) when the signal comes. */
            NC(ncclAllReduce((void *)s1, (void *)s1, N, ncclFloat32, ncclSum, comm, st));
            printf("rank 1: in the all-reduce\n");
            fflush(stdout);
            cuStreamSynchronize(st); /* killed here */
            return 7;
        } else if (strcmp(mode, "killmid") == 0) {
            const char *dead = getenv("NCCL_RANKS_DEAD");

            for (int i = 0; dead != NULL && i < 600 && access(dead, F_OK) != 0; i++)
                usleep(100000);
            expect_failure(comm, 60, ncclRemoteError);
        } else if (rank == 1 && strcmp(mode, "die") == 0)
            _exit(0); /* no goodbye: the worker sees the connection drop */
        else if (rank == 1)
            sleep(30); /* hang: alive, never calls */
        else
            expect_failure(comm, 20, strcmp(mode, "die") == 0 ? ncclRemoteError : ncclSystemError);
    }
    if (fails != 0)
        return 1;
    printf("rank %d: ok\n", rank);
    return 0;
}
