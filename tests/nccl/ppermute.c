/* XLA's collective-permute (JAX's ppermute) over the devices of one process: the clique's
 * communicators made in one group from one thread (ncclGroupStart, ncclCommInitRankConfig per
 * device, ncclGroupEnd, as XLA made them until 2024) or each by a blocking
 * ncclCommInitRankConfig on a thread of its own (as XLA's NcclCollectives makes them now, in a
 * thread pool), or split so from communicators made so (XLA's SplitCommunicators: a blocking
 * ncclCommSplit per device on a thread of its own), then a thread per device, each its own group of
 * a send to the next device and a receive from the previous one, ncclCommGetAsyncError (as XLA asks
 * after every group), a stream synchronization and the received values checked; twice (the
 * first exchange, which makes NCCL connect the pairs, and a later one).
 *
 * Built twice: into nccl_ranks (mode `ppermute`: through rgpu, every device's call in one
 * session, whose worker runs them on one thread) and, with PPERMUTE_NATIVE, as
 * nccl_ppermute_native, linked straight to the fake NCCL and the fake driver: the same program
 * with NCCL's per-thread groups, which shows that the fake's lazy connection (tests/fakenccl)
 * does not deadlock a correct program. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "nccl/nccl_abi.h"
#include "tests/nccl/ppermute.h"

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e);
ncclResult_t ncclSend(const void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
ncclResult_t ncclRecv(void *, size_t, ncclDataType_t, int, ncclComm_t, CUstream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#define PP_N      256 /* floats per exchange */
#define PP_ROUNDS 2

struct pp_dev {
    int dev, ndev;
    CUcontext ctx;
    CUstream s;
    CUdeviceptr send, recv;
    ncclComm_t comm, parent; /* parent: the one comm was split from (PPERMUTE_SPLIT) */
    ncclUniqueId id;
    int bad;
    pthread_t thread;
};

/* The value device `dev` sends in round `round`. */
static float pp_value(int dev, int round)
{
    return (float)(100 * (round + 1) + dev);
}

static void *pp_main(void *arg)
{
    struct pp_dev *d = arg;
    int next = (d->dev + 1) % d->ndev, prev = (d->dev + d->ndev - 1) % d->ndev;
    float in[PP_N], out[PP_N];
    ncclResult_t e = ncclSuccess;

    if (cuCtxSetCurrent(d->ctx) != CUDA_SUCCESS) {
        d->bad++;
        return NULL;
    }
    for (int round = 0; round < PP_ROUNDS; round++) {
        for (int k = 0; k < PP_N; k++)
            in[k] = pp_value(d->dev, round), out[k] = -1.0f;
        if (cuMemcpyHtoD(d->send, in, sizeof(in)) != CUDA_SUCCESS ||
            cuMemcpyHtoD(d->recv, out, sizeof(out)) != CUDA_SUCCESS ||
            ncclGroupStart() != ncclSuccess ||
            ncclSend((void *)d->send, PP_N, ncclFloat32, next, d->comm, d->s) != ncclSuccess ||
            ncclRecv((void *)d->recv, PP_N, ncclFloat32, prev, d->comm, d->s) != ncclSuccess ||
            ncclGroupEnd() != ncclSuccess || ncclCommGetAsyncError(d->comm, &e) != ncclSuccess ||
            e != ncclSuccess) {
            fprintf(stderr, "ppermute: device %d round %d: a call failed (async error %d)\n",
                    d->dev, round, (int)e);
            d->bad++;
            return NULL;
        }
        CUresult r = cuStreamSynchronize(d->s);

        if (r == CUDA_SUCCESS)
            r = cuMemcpyDtoH(out, d->recv, sizeof(out));
        if (r != CUDA_SUCCESS || out[0] != pp_value(prev, round) ||
            out[PP_N - 1] != pp_value(prev, round)) {
            fprintf(stderr, "ppermute: device %d round %d: %d, got %g want %g\n", d->dev, round,
                    (int)r, out[0], pp_value(prev, round));
            d->bad++;
        }
    }
    return NULL;
}

/* fn on a thread per device, all at once; the failures they counted (1 when one cannot start:
 * the others are joined first). */
static int pp_on_threads(struct pp_dev *d, int ndev, void *(*fn)(void *))
{
    int bad = 0, started = 0;

    while (started < ndev && pthread_create(&d[started].thread, NULL, fn, &d[started]) == 0)
        started++;
    for (int i = 0; i < started; i++) {
        pthread_join(d[i].thread, NULL);
        bad += d[i].bad;
    }
    return started < ndev ? bad + 1 : bad;
}

/* A creation thread of XLA's pool: this device's communicator, a blocking init (or, with a
 * parent, a blocking split of it). */
static void *pp_init_main(void *arg)
{
    struct pp_dev *d = arg;
    ncclResult_t res;

    if (cuCtxSetCurrent(d->ctx) != CUDA_SUCCESS ||
        (res = d->parent != NULL ? ncclCommSplit(d->parent, 0, d->dev, &d->comm, NULL)
                                 : ncclCommInitRankConfig(&d->comm, d->ndev, d->id, d->dev,
                                                          NULL)) != ncclSuccess) {
        fprintf(stderr, "ppermute: %s of device %d on its thread failed\n",
                d->parent != NULL ? "split" : "init", d->dev);
        d->bad++;
    }
    return NULL;
}

/* The clique's communicators, a thread each (split: then split from those, a thread each, and
 * the parents kept in .parent); the number of failures. */
static int pp_init_threads(struct pp_dev *d, int ndev, bool split)
{
    int bad;

    if (split) {
        if ((bad = pp_init_threads(d, ndev, false)) != 0)
            return bad;
        for (int i = 0; i < ndev; i++)
            d[i].parent = d[i].comm, d[i].comm = NULL;
    }
    return pp_on_threads(d, ndev, pp_init_main);
}

/* The clique's communicators in one group from this thread; the number of failures. */
static int pp_init_group(struct pp_dev *d, int ndev, ncclUniqueId id)
{
    ncclResult_t res;

    if (ncclGroupStart() != ncclSuccess)
        return 1;
    for (int i = 0; i < ndev; i++) {
        cuCtxSetCurrent(d[i].ctx);
        if ((res = ncclCommInitRankConfig(&d[i].comm, ndev, id, i, NULL)) != ncclSuccess) {
            fprintf(stderr, "ppermute: init of device %d: %d\n", i, (int)res);
            return 1;
        }
    }
    if ((res = ncclGroupEnd()) != ncclSuccess) {
        fprintf(stderr, "ppermute: the creation group's end: %d\n", (int)res);
        return 1;
    }
    return 0;
}

int ppermute_run(int ndev, enum ppermute_make how)
{
    struct pp_dev d[PPERMUTE_MAX_DEVICES];
    ncclUniqueId id;
    int bad = 0;

    if (ndev < 2 || ndev > PPERMUTE_MAX_DEVICES || ncclGetUniqueId(&id) != ncclSuccess)
        return 1;
    for (int i = 0; i < ndev; i++) {
        CUdevice dev;

        d[i] = (struct pp_dev){.dev = i, .ndev = ndev, .id = id};
        if (cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
            cuDevicePrimaryCtxRetain(&d[i].ctx, dev) != CUDA_SUCCESS ||
            cuCtxSetCurrent(d[i].ctx) != CUDA_SUCCESS ||
            cuStreamCreateWithPriority(&d[i].s, CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS ||
            cuMemAlloc(&d[i].send, PP_N * sizeof(float)) != CUDA_SUCCESS ||
            cuMemAlloc(&d[i].recv, PP_N * sizeof(float)) != CUDA_SUCCESS) {
            fprintf(stderr, "ppermute: device %d: setup failed\n", i);
            return 1;
        }
    }
    if ((how == PPERMUTE_GROUP ? pp_init_group(d, ndev, id)
                               : pp_init_threads(d, ndev, how == PPERMUTE_SPLIT)) != 0)
        return 1;
    bad = pp_on_threads(d, ndev, pp_main);
    for (int i = 0; i < ndev; i++) {
        cuCtxSetCurrent(d[i].ctx);
        if (ncclCommDestroy(d[i].comm) != ncclSuccess ||
            (d[i].parent != NULL && ncclCommDestroy(d[i].parent) != ncclSuccess))
            bad++;
        cuMemFree(d[i].send);
        cuMemFree(d[i].recv);
        cuStreamDestroy(d[i].s);
    }
    return bad;
}

#ifdef PPERMUTE_NATIVE
/* nccl_ppermute_native NDEV [threads|split]: prints "ppermute: ok" and exits 0 when every value
 * arrived (threads: the communicators made a thread each; split: split so from those). */
int main(int argc, char **argv)
{
    int ndev = argc > 1 ? atoi(argv[1]) : 2;

    if (cuInit(0) != CUDA_SUCCESS)
        return 2;
    enum ppermute_make how = argc < 3                          ? PPERMUTE_GROUP
                             : strcmp(argv[2], "threads") == 0 ? PPERMUTE_THREADS
                             : strcmp(argv[2], "split") == 0   ? PPERMUTE_SPLIT
                                                               : PPERMUTE_GROUP;

    if (ppermute_run(ndev, how) != 0) {
        printf("ppermute: FAILED\n");
        return 1;
    }
    printf("ppermute: ok\n");
    return 0;
}
#endif
