/* A fake libnccl.so.2 for CI (test double under gpu-server's worker, on the fake driver, whose
 * device memory is host memory): it really combines the ranks' buffers across processes through
 * POSIX shared memory named by the unique id, with a barrier per step. Collectives run at the
 * call (the fake driver's streams are synchronous), grouped calls at ncclGroupEnd with sends
 * first. A rank that waits for a peer notices a dead peer process and reports ncclRemoteError as
 * the communicator's async error, and keeps waiting, like a real NCCL kernel, until the
 * communicator is aborted (from another thread), so the worker's watchdog is what ends the wait.
 * Limits: 8 ranks, 1 MiB per rank per collective, 256 KiB per send, no 16-bit float
 * reductions.
 * FAKENCCL_DRIVER names the fake driver (for ncclMemAlloc and the communicator's own 1 MiB of
 * device memory); FAKENCCL_VERSION overrides the version code; FAKENCCL_LAZY_BYTES makes a
 * communicator allocate that much more device memory at its first collective of more than
 * 64 KiB (as NCCL connects a new algorithm lazily); FAKENCCL_BLIND=1 makes it not notice a dead
 * peer (as NCCL across NVLink does not: its kernels spin on device memory); FAKENCCL_OLD=1 makes
 * it an NCCL before 2.28 (no AlltoAll, Gather, Scatter, windows, shrink, revoke, scalable init,
 * teams, group simulation); FAKENCCL_ASYNC=1 makes collectives asynchronous as a real NCCL's
 * kernels are: the call (or the group's end) enqueues them on the communicator's "device", a
 * thread that runs them in order, and returns; the fake driver's stream, event and context
 * synchronization waits for them (fakecuda_device_work), so a rank that waits for a dead peer
 * holds its stream, not the worker's thread.
 *
 * Point-to-point connections are made lazily, as NCCL makes them: the first send from rank a
 * to rank b of a communicator connects a's send side of that pair, the first receive of b from a
 * its receive side, each on the host, in the call (a send or receive outside a group is a group
 * of one) or at the group's end that holds it, before anything is enqueued. The connect waits
 * (host thread, in the group's end) until the other side of the pair has reached its own connect
 * (a flag per direction of a pair in the communicator's shared memory; the wait notices an abort
 * and a dead peer as the fake's other waits do); once connected, later groups skip it. A rank's
 * part of a group first announces every connect it needs, then waits for them, so a ring of
 * first exchanges connects (NCCL too posts its connection information before it waits); a
 * group that holds both sides (ranks of one process from one thread: each communicator's part
 * runs on its own thread) connects them together. A send to oneself needs no peer. This is
 * always on, in both modes (FAKENCCL_P2P_CONNECT=0 turns it off): a real NCCL always connects
 * so, and a fake that did not would let a program pass that a real NCCL hangs (ranks of one
 * rgpu session doing a first exchange from a thread each, the group ends one after another on
 * one worker thread: issue 29). FAKENCCL_P2P_BYTES=N makes a connect allocate N bytes of device
 * memory per side connected (a rank's send side to a peer, its receive side from a peer: N
 * each), as NCCL allocates a connection's buffers, so a clique of n ranks whose pairs all
 * connect takes 2n(n-1)N more; it is freed when the communicator is destroyed or aborted (as
 * FAKENCCL_LAZY_BYTES's is). */

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "nccl/nccl_abi.h"
#include "tests/fakecuda/fakecuda.h"

#define FK_EXPORT     __attribute__((visibility("default")))
#define FK_MAX_RANKS  8
#define FK_SLOT       (1u << 20)
#define FK_BOX        (256u << 10) /* one point-to-point mailbox */
#define FK_MAX_OPS    8
#define FK_COMM_BYTES (1u << 20)
#define FK_GIVE_UP_S  120 /* never hang CI: a wait this long fails with ncclSystemError */

struct fk_shm {
    atomic_int joined;
    atomic_ullong arrived;
    pid_t pids[FK_MAX_RANKS];
    int colors[FK_MAX_RANKS], keys[FK_MAX_RANKS];
    struct {
        atomic_int full;
        uint32_t len;
    } mbox[FK_MAX_RANKS][FK_MAX_RANKS];
    /* [from][to]: rank `from` reached its connect to send to `to`; `to` its connect to receive */
    atomic_int send_conn[FK_MAX_RANKS][FK_MAX_RANKS], recv_conn[FK_MAX_RANKS][FK_MAX_RANKS];
};
#define FK_SHM_BYTES                                                                               \
    (sizeof(struct fk_shm) + (size_t)FK_MAX_RANKS * FK_SLOT +                                      \
     (size_t)FK_MAX_RANKS * FK_MAX_RANKS * FK_BOX)

struct ncclComm {
    char name[64];
    int nranks, rank, splits;
    bool pending; /* made inside a group: opened at its end, in its context */
    void *ctx;    /* the context current when it was made (its device) */
    bool grown;   /* FAKENCCL_LAZY_BYTES taken */
    atomic_int revoked;
    void *lazy; /* that memory */
    struct fk_shm *shm;
    uint8_t *slots; /* FK_MAX_RANKS collective slots, then FK_MAX_RANKS^2 mailboxes */
    uint64_t barriers;
    atomic_int aborted, async;
    double premul[FK_MAX_OPS];
    /* FAKENCCL_ASYNC: the queue of the communicator's "device" thread */
    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    struct fk_job *head, *tail;
    pthread_t dev;
    bool dev_started, dev_stop;
    void *internal; /* device memory of the communicator (quota accounting tests) */
    bool send_ready[FK_MAX_RANKS], recv_ready[FK_MAX_RANKS]; /* p2p connected, per peer */
    void *send_mem[FK_MAX_RANKS], *recv_mem[FK_MAX_RANKS];   /* FAKENCCL_P2P_BYTES, per peer */
};

struct fk_op {
    int kind; /* 0 allreduce 1 bcast 2 reduce 3 allgather 4 reducescatter 5 send 6 recv
               * 7 alltoall 8 gather 9 scatter */
    const void *sb;
    void *rb;
    size_t count;
    ncclDataType_t t;
    int op, root;
    struct ncclComm *comm;
    void *stream;
};
static __thread int group_depth;
static __thread struct fk_op *queued;
static __thread size_t nqueued, queued_cap;

/* ---- the fake driver's memory ----------------------------------------------------------- */

typedef int (*mem_alloc_fn)(uint64_t *dptr, size_t n);
typedef int (*mem_free_fn)(uint64_t dptr);
typedef int (*ctx_fn)(void *ctx);
typedef int (*ctx_get_fn)(void **ctx);
static mem_alloc_fn drv_alloc;
static mem_free_fn drv_free;
static ctx_fn drv_ctx_set;
static ctx_get_fn drv_ctx_get;
static void *drv_handle;

static void drv_bind(void)
{
    const char *path = getenv("FAKENCCL_DRIVER");
    void *dl;

    if (drv_alloc != NULL || path == NULL || (dl = dlopen(path, RTLD_NOW | RTLD_NOLOAD)) == NULL)
        return;
    drv_handle = dl;
    drv_free = (mem_free_fn)dlsym(dl, "cuMemFree_v2");
    drv_ctx_set = (ctx_fn)dlsym(dl, "cuCtxSetCurrent");
    drv_ctx_get = (ctx_get_fn)dlsym(dl, "cuCtxGetCurrent");
    drv_alloc = (mem_alloc_fn)dlsym(dl, "cuMemAlloc_v2");
}

/* ---- waiting ------------------------------------------------------------------------------ */

static bool peer_dead(const struct ncclComm *c)
{
    const char *blind = getenv("FAKENCCL_BLIND");

    if (blind != NULL && strcmp(blind, "1") == 0)
        return false;
    for (int r = 0; r < c->nranks; r++)
        if (c->shm->pids[r] > 0 && kill(c->shm->pids[r], 0) != 0 && errno == ESRCH)
            return true;
    return false;
}

/* Wait until *v >= target; ncclSuccess, or the error that ended the wait. */
static ncclResult_t wait_for(struct ncclComm *c, atomic_ullong *v, unsigned long long target)
{
    time_t start = time(NULL);
    const struct timespec nap = {0, 100 * 1000};

    while (atomic_load(v) < target) {
        if (atomic_load(&c->aborted))
            return ncclRemoteError;
        if (atomic_load(&c->async) == ncclSuccess && peer_dead(c))
            atomic_store(&c->async, ncclRemoteError); /* the worker's watchdog aborts us */
        if (time(NULL) - start > FK_GIVE_UP_S)
            return ncclSystemError;
        nanosleep(&nap, NULL);
    }
    return ncclSuccess;
}

static ncclResult_t barrier(struct ncclComm *c)
{
    atomic_fetch_add(&c->shm->arrived, 1);
    c->barriers++;
    return wait_for(c, &c->shm->arrived, c->barriers * (unsigned long long)c->nranks);
}

static ncclResult_t wait_int(struct ncclComm *c, atomic_int *v, int want)
{
    time_t start = time(NULL);
    const struct timespec nap = {0, 100 * 1000};

    while (atomic_load(v) != want) {
        if (atomic_load(&c->aborted))
            return ncclRemoteError;
        if (atomic_load(&c->async) == ncclSuccess && peer_dead(c))
            atomic_store(&c->async, ncclRemoteError);
        if (time(NULL) - start > FK_GIVE_UP_S)
            return ncclSystemError;
        nanosleep(&nap, NULL);
    }
    return ncclSuccess;
}

/* ---- reductions --------------------------------------------------------------------------- */

#define REDUCE_CASE(T, tcode)                                                                      \
    case tcode: {                                                                                  \
        T *d = dst;                                                                                \
        const T *x = src;                                                                          \
        for (size_t i = 0; i < n; i++)                                                             \
            switch (op) {                                                                          \
            case ncclProd:                                                                         \
                d[i] = first ? x[i] : (T)(d[i] * x[i]);                                            \
                break;                                                                             \
            case ncclMax:                                                                          \
                d[i] = first || x[i] > d[i] ? x[i] : d[i];                                         \
                break;                                                                             \
            case ncclMin:                                                                          \
                d[i] = first || x[i] < d[i] ? x[i] : d[i];                                         \
                break;                                                                             \
            default:                                                                               \
                d[i] = (T)((first ? 0 : d[i]) + (T)(x[i] * scale));                                \
                break;                                                                             \
            }                                                                                      \
        return true;                                                                               \
    }

static bool reduce_into(void *dst, const void *src, size_t n, ncclDataType_t t, int op,
                        double scale, bool first)
{
    switch (t) {
        REDUCE_CASE(int8_t, ncclInt8)
        REDUCE_CASE(uint8_t, ncclUint8)
        REDUCE_CASE(int32_t, ncclInt32)
        REDUCE_CASE(uint32_t, ncclUint32)
        REDUCE_CASE(int64_t, ncclInt64)
        REDUCE_CASE(uint64_t, ncclUint64)
        REDUCE_CASE(float, ncclFloat32)
        REDUCE_CASE(double, ncclFloat64)
    default:
        return false;
    }
}

static bool finish_avg(void *dst, size_t n, ncclDataType_t t, int nranks)
{
    if (t == ncclFloat32)
        for (size_t i = 0; i < n; i++)
            ((float *)dst)[i] /= (float)nranks;
    else if (t == ncclFloat64)
        for (size_t i = 0; i < n; i++)
            ((double *)dst)[i] /= nranks;
    else if (t == ncclInt32)
        for (size_t i = 0; i < n; i++)
            ((int32_t *)dst)[i] /= nranks;
    else
        return false;
    return true;
}

/* dst = op over ranks of slot[r] + offset (n elements). */
static ncclResult_t combine(struct ncclComm *c, void *dst, size_t offset, size_t n,
                            ncclDataType_t t, int op)
{
    double scale = op >= ncclNumOps ? c->premul[op - ncclNumOps] : 1.0;
    int base = op >= ncclNumOps || op == ncclAvg ? ncclSum : op;

    if (op >= ncclNumOps + FK_MAX_OPS)
        return ncclInvalidArgument;
    for (int r = 0; r < c->nranks; r++)
        if (!reduce_into(dst, c->slots + (size_t)r * FK_SLOT + offset, n, t, base, scale, r == 0))
            return ncclInvalidArgument;
    if (op == ncclAvg && !finish_avg(dst, n, t, c->nranks))
        return ncclInvalidArgument;
    return ncclSuccess;
}

/* ---- one operation ------------------------------------------------------------------------ */

/* FAKENCCL_LAZY_BYTES: a first collective of more than 64 KiB makes the communicator allocate
 * that much device memory (NCCL's lazily connected algorithms). */
static ncclResult_t grow(struct ncclComm *c, size_t bytes)
{
    const char *env = getenv("FAKENCCL_LAZY_BYTES");
    uint64_t d = 0;

    if (c->grown || bytes <= (64u << 10) || env == NULL || atoll(env) <= 0)
        return ncclSuccess;
    c->grown = true;
    drv_bind();
    if (drv_alloc == NULL || drv_alloc(&d, (size_t)atoll(env)) != 0)
        return ncclUnhandledCudaError;
    c->lazy = (void *)(uintptr_t)d;
    return ncclSuccess;
}

static ncclResult_t run_p2p(const struct fk_op *o, size_t bytes)
{
    struct ncclComm *c = o->comm;
    int from = o->kind == 5 ? c->rank : o->root, to = o->kind == 5 ? o->root : c->rank;
    uint8_t *box = c->slots + (size_t)FK_MAX_RANKS * FK_SLOT +
                   ((size_t)from * FK_MAX_RANKS + (size_t)to) * FK_BOX;
    ncclResult_t res;

    if (bytes > FK_BOX)
        return ncclInvalidArgument;
    if ((res = wait_int(c, &c->shm->mbox[from][to].full, o->kind == 5 ? 0 : 1)) != ncclSuccess)
        return res;
    if (o->kind == 5) {
        memcpy(box, o->sb, bytes);
        c->shm->mbox[from][to].len = (uint32_t)bytes;
        atomic_store(&c->shm->mbox[from][to].full, 1);
        return ncclSuccess;
    }
    if (c->shm->mbox[from][to].len != bytes)
        return ncclInvalidUsage; /* the sizes of a send and its receive differ */
    memcpy(o->rb, box, bytes);
    atomic_store(&c->shm->mbox[from][to].full, 0);
    return ncclSuccess;
}

static ncclResult_t run_op(const struct fk_op *o)
{
    struct ncclComm *c = o->comm;
    size_t es = nccl_type_size(o->t), bytes = o->count * es;
    uint8_t *mine = c->slots + (size_t)c->rank * FK_SLOT;
    ncclResult_t res;

    size_t whole = o->kind == 4 || o->kind == 7 || o->kind == 9 ? (size_t)c->nranks : 1;

    if (atomic_load(&c->aborted) || atomic_load(&c->revoked))
        return ncclInvalidUsage;
    if (bytes * whole > FK_SLOT || es == 0)
        return ncclInvalidArgument;
    if ((res = grow(c, bytes * whole)) != ncclSuccess)
        return res;
    if (o->kind == 5 || o->kind == 6)
        return run_p2p(o, bytes);
    if ((o->kind != 1 && o->kind != 9) || c->rank == o->root)
        memcpy(mine, o->sb, bytes * whole);
    if ((res = barrier(c)) != ncclSuccess)
        return res;
    switch (o->kind) {
    case 0:
        res = combine(c, o->rb, 0, o->count, o->t, o->op);
        break;
    case 1:
        memcpy(o->rb, c->slots + (size_t)o->root * FK_SLOT, bytes);
        break;
    case 2:
        res = c->rank == o->root ? combine(c, o->rb, 0, o->count, o->t, o->op) : ncclSuccess;
        break;
    case 3:
        for (int r = 0; r < c->nranks; r++)
            memcpy((uint8_t *)o->rb + (size_t)r * bytes, c->slots + (size_t)r * FK_SLOT, bytes);
        break;
    case 4:
        res = combine(c, o->rb, (size_t)c->rank * bytes, o->count, o->t, o->op);
        break;
    case 7: /* from rank r: its part for me */
        for (int r = 0; r < c->nranks; r++)
            memcpy((uint8_t *)o->rb + (size_t)r * bytes,
                   c->slots + (size_t)r * FK_SLOT + (size_t)c->rank * bytes, bytes);
        break;
    case 8:
        for (int r = 0; r < c->nranks && c->rank == o->root; r++)
            memcpy((uint8_t *)o->rb + (size_t)r * bytes, c->slots + (size_t)r * FK_SLOT, bytes);
        break;
    default: /* 9: my part of the root's */
        memcpy(o->rb, c->slots + (size_t)o->root * FK_SLOT + (size_t)c->rank * bytes, bytes);
        break;
    }
    if (res != ncclSuccess)
        return res;
    return barrier(c);
}

/* ---- lazy point-to-point connection ----------------------------------------------------- */

static bool p2p_connect_on(void)
{
    const char *e = getenv("FAKENCCL_P2P_CONNECT");

    return e == NULL || strcmp(e, "0") != 0;
}

/* The side of o's pair that o needs (its own flag), and the peer's side it waits for; NULL when
 * it needs no connect (not a send or receive, to itself, or connected already). */
static atomic_int *p2p_side(struct ncclComm *c, const struct fk_op *o, atomic_int **theirs)
{
    int peer = o->root;

    if ((o->kind != 5 && o->kind != 6) || peer < 0 || peer >= c->nranks || peer == c->rank ||
        (o->kind == 5 ? c->send_ready[peer] : c->recv_ready[peer]))
        return NULL;
    if (o->kind == 5) {
        *theirs = &c->shm->recv_conn[c->rank][peer];
        return &c->shm->send_conn[c->rank][peer];
    }
    *theirs = &c->shm->send_conn[peer][c->rank];
    return &c->shm->recv_conn[peer][c->rank];
}

/* FAKENCCL_P2P_BYTES: the device memory of one side of a connection, into *slot. */
static ncclResult_t p2p_alloc(void **slot)
{
    const char *env = getenv("FAKENCCL_P2P_BYTES");
    uint64_t d = 0;

    if (env == NULL || atoll(env) <= 0 || *slot != NULL)
        return ncclSuccess;
    drv_bind();
    if (drv_alloc == NULL || drv_alloc(&d, (size_t)atoll(env)) != 0)
        return ncclUnhandledCudaError;
    *slot = (void *)(uintptr_t)d;
    return ncclSuccess;
}

/* Connect every pair that c's operations among ops[0..n) need, on this (host) thread: announce
 * each first, then wait for each peer's side (and take its memory, FAKENCCL_P2P_BYTES). */
static ncclResult_t p2p_connect(struct ncclComm *c, const struct fk_op *ops, size_t n)
{
    ncclResult_t res = ncclSuccess;
    atomic_int *theirs;

    if (!p2p_connect_on() || c->shm == NULL)
        return ncclSuccess;
    for (size_t i = 0; i < n; i++) {
        atomic_int *mine = ops[i].comm == c ? p2p_side(c, &ops[i], &theirs) : NULL;

        if (mine != NULL)
            atomic_store(mine, 1);
    }
    for (size_t i = 0; i < n && res == ncclSuccess; i++) {
        if (ops[i].comm != c || p2p_side(c, &ops[i], &theirs) == NULL)
            continue;
        if ((res = wait_int(c, theirs, 1)) == ncclSuccess) {
            int peer = ops[i].root;

            if (ops[i].kind == 5)
                c->send_ready[peer] = true;
            else
                c->recv_ready[peer] = true;
            res = p2p_alloc(ops[i].kind == 5 ? &c->send_mem[peer] : &c->recv_mem[peer]);
        }
    }
    return res;
}

/* ---- FAKENCCL_ASYNC: operations on the communicator's "device" -------------------------- */

struct fk_job {
    struct fk_op op;
    struct fk_job *next;
};

/* Per stream: operations enqueued and finished (the fake driver's view, fakecuda.h). */
#define FK_MAX_STREAMS 128
static struct {
    void *stream;
    unsigned long long enq, fin;
} streams[FK_MAX_STREAMS];
static int nstreams;
static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;

static bool async_mode(void)
{
    const char *e = getenv("FAKENCCL_ASYNC");

    return e != NULL && strcmp(e, "1") == 0;
}

static int stream_slot(void *s) /* streams_lock held; -1 when full */
{
    for (int i = 0; i < nstreams; i++)
        if (streams[i].stream == s)
            return i;
    if (nstreams == FK_MAX_STREAMS)
        return -1;
    streams[nstreams].stream = s;
    streams[nstreams].enq = streams[nstreams].fin = 0;
    return nstreams++;
}

static unsigned long long work_ticket(CUstream s)
{
    unsigned long long t = 0;

    pthread_mutex_lock(&streams_lock);
    for (int i = 0; i < nstreams; i++)
        if (streams[i].stream == (void *)s)
            t = streams[i].enq;
    pthread_mutex_unlock(&streams_lock);
    return t;
}

static bool work_done(CUstream s, unsigned long long ticket)
{
    bool done = true;

    pthread_mutex_lock(&streams_lock);
    for (int i = 0; i < nstreams; i++)
        if (s == FK_ALL_STREAMS ? streams[i].fin < streams[i].enq
                                : streams[i].stream == (void *)s && streams[i].fin < ticket)
            done = false;
    pthread_mutex_unlock(&streams_lock);
    return done;
}

static const struct fk_device_work device_work = {work_ticket, work_done};

static void *device_main(void *arg)
{
    struct ncclComm *c = arg;
    struct fk_job *j;
    ncclResult_t res;

    for (;;) {
        pthread_mutex_lock(&c->qlock);
        while (c->head == NULL && !c->dev_stop)
            pthread_cond_wait(&c->qcond, &c->qlock);
        if ((j = c->head) == NULL) {
            pthread_mutex_unlock(&c->qlock);
            return NULL;
        }
        c->head = j->next;
        if (c->head == NULL)
            c->tail = NULL;
        pthread_mutex_unlock(&c->qlock);
        res = run_op(&j->op);
        if (res != ncclSuccess && !atomic_load(&c->aborted)) {
            int ok = ncclSuccess;
            atomic_compare_exchange_strong(&c->async, &ok, (int)res);
        }
        pthread_mutex_lock(&streams_lock);
        int k = stream_slot(j->op.stream);
        if (k >= 0)
            streams[k].fin++;
        pthread_mutex_unlock(&streams_lock);
        free(j);
    }
}

/* Enqueue o on its communicator's device (its stream's ticket taken now, as a launch's). */
static ncclResult_t enqueue(const struct fk_op *o)
{
    struct ncclComm *c = o->comm;
    struct fk_job *j = calloc(1, sizeof(*j));
    int k;

    if (j == NULL)
        return ncclSystemError;
    j->op = *o;
    pthread_mutex_lock(&streams_lock);
    if ((k = stream_slot(o->stream)) >= 0)
        streams[k].enq++;
    pthread_mutex_unlock(&streams_lock);
    if (k < 0) {
        free(j);
        return ncclSystemError;
    }
    pthread_mutex_lock(&c->qlock);
    if (!c->dev_started) {
        void (*reg)(const struct fk_device_work *);

        drv_bind();
        if (drv_handle != NULL &&
            (*(void **)&reg = dlsym(drv_handle, "fakecuda_device_work")) != NULL)
            reg(&device_work);
        c->dev_started = pthread_create(&c->dev, NULL, device_main, c) == 0;
    }
    if (c->tail != NULL)
        c->tail->next = j;
    else
        c->head = j;
    c->tail = j;
    pthread_cond_signal(&c->qcond);
    pthread_mutex_unlock(&c->qlock);
    return ncclSuccess;
}

/* The device thread ends once its queue is empty (joined: a destroy; detached: an abort). */
static void device_stop(struct ncclComm *c, bool join)
{
    bool started;

    pthread_mutex_lock(&c->qlock);
    c->dev_stop = true;
    started = c->dev_started;
    c->dev_started = false;
    pthread_cond_signal(&c->qcond);
    pthread_mutex_unlock(&c->qlock);
    if (started && join)
        pthread_join(c->dev, NULL);
    else if (started)
        pthread_detach(c->dev);
}

static ncclResult_t submit(int kind, const void *sb, void *rb, size_t count, ncclDataType_t t,
                           int op, int root, ncclComm_t comm, void *stream)
{
    struct fk_op o = {kind, sb, rb, count, t, op, root, comm, stream};
    ncclResult_t res;

    if (comm == NULL)
        return ncclInvalidArgument;
    if (group_depth == 0 && (res = p2p_connect(comm, &o, 1)) != ncclSuccess)
        return res; /* a group of one: connected first, as at a group's end */
    if (group_depth == 0)
        return async_mode() ? enqueue(&o) : run_op(&o);
    if (nqueued == queued_cap) {
        size_t cap = queued_cap ? 2 * queued_cap : 16;
        struct fk_op *q = realloc(queued, cap * sizeof(*q));

        if (q == NULL)
            return ncclSystemError;
        queued = q, queued_cap = cap;
    }
    queued[nqueued++] = o;
    return ncclSuccess;
}

FK_EXPORT ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

/* Communicators made inside the open group (opened at its end). */
#define FK_MAX_MADE 32
static __thread struct ncclComm *made[FK_MAX_MADE];
static __thread int nmade;

static ncclResult_t comm_join(struct ncclComm *c);

/* One communicator's part of a group: opened if made in it, then its ops, sends first (so that
 * grouped exchanges never deadlock). */
struct fk_part {
    struct ncclComm *comm;
    const struct fk_op *ops;
    size_t nops;
    bool connect, launch; /* connect: ncclGroupEnd (not a simulation) */
    ncclResult_t res;
    pthread_t thread;
};

static ncclResult_t run_part(const struct fk_part *p)
{
    ncclResult_t res = ncclSuccess, r;

    if (p->comm->ctx != NULL && drv_ctx_set != NULL) /* a thread of the group's: its device */
        drv_ctx_set(p->comm->ctx);
    if (p->comm->pending && (res = comm_join(p->comm)) != ncclSuccess)
        return res;
    if (p->connect && (res = p2p_connect(p->comm, p->ops, p->nops)) != ncclSuccess)
        return res;
    for (int pass = 0; pass < 2 && p->launch; pass++)
        for (size_t i = 0; i < p->nops; i++)
            if (p->ops[i].comm == p->comm && (p->ops[i].kind == 5) == (pass == 0) &&
                (r = run_op(&p->ops[i])) != ncclSuccess && res == ncclSuccess)
                res = r;
    return res;
}

static void *part_main(void *arg)
{
    struct fk_part *p = arg;

    p->res = run_part(p);
    return NULL;
}

static int part_add(struct fk_part *parts, int np, struct ncclComm *c)
{
    for (int i = 0; i < np; i++)
        if (parts[i].comm == c)
            return np;
    if (np < FK_MAX_MADE)
        parts[np++] = (struct fk_part){.comm = c, .ops = queued, .nops = nqueued};
    return np;
}

/* launch: run the queued ops (ncclGroupEnd), or drop them (ncclGroupSimulateEnd). Several
 * communicators progress together, each on a thread: ranks of one process wait for each other. */
static ncclResult_t group_end(bool launch)
{
    struct fk_part parts[FK_MAX_MADE];
    ncclResult_t res = ncclSuccess;
    int np = 0;

    if (group_depth == 0)
        return ncclInvalidUsage;
    if (--group_depth > 0)
        return ncclSuccess;
    for (int i = 0; i < nmade; i++)
        np = part_add(parts, np, made[i]);
    for (size_t i = 0; i < nqueued; i++)
        np = part_add(parts, np, queued[i].comm);
    for (int i = 0; i < np; i++) {
        parts[i].connect = launch;
        parts[i].launch = launch && !async_mode(); /* FAKENCCL_ASYNC: enqueued below */
    }
    if (np == 1)
        res = run_part(&parts[0]);
    for (int i = 0; i < np && np > 1; i++)
        if (pthread_create(&parts[i].thread, NULL, part_main, &parts[i]) != 0)
            parts[i].res = run_part(&parts[i]), parts[i].thread = 0;
    for (int i = 0; i < np && np > 1; i++) {
        if (parts[i].thread != 0)
            pthread_join(parts[i].thread, NULL);
        if (parts[i].res != ncclSuccess && res == ncclSuccess)
            res = parts[i].res;
    }
    for (int pass = 0; pass < 2 && launch && async_mode() && res == ncclSuccess; pass++)
        for (size_t i = 0; i < nqueued; i++) /* sends first, each on its communicator's device */
            if ((queued[i].kind == 5) == (pass == 0) && (res = enqueue(&queued[i])) != ncclSuccess)
                break;
    nqueued = 0;
    nmade = 0;
    return res;
}

FK_EXPORT ncclResult_t ncclGroupEnd(void)
{
    return group_end(true);
}

#ifndef FK_OLD
FK_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *info)
{
    size_t ops = nqueued;
    ncclResult_t res;

    if (info == NULL || info->magic != NCCL_SIM_INFO_MAGIC)
        return ncclInvalidArgument;
    if ((res = group_end(false)) == ncclSuccess)
        info->estimatedTime = 10.0f * (float)ops; /* a fake estimate: 10 us an op */
    return res;
}
#endif

FK_EXPORT ncclResult_t ncclAllReduce(const void *sb, void *rb, size_t count, ncclDataType_t t,
                                     ncclRedOp_t op, ncclComm_t comm, void *stream)
{
    return submit(0, sb, rb, count, t, (int)op, 0, comm, stream);
}

FK_EXPORT ncclResult_t ncclBroadcast(const void *sb, void *rb, size_t count, ncclDataType_t t,
                                     int root, ncclComm_t comm, void *stream)
{
    return submit(1, sb, rb, count, t, 0, root, comm, stream);
}

FK_EXPORT ncclResult_t ncclReduce(const void *sb, void *rb, size_t count, ncclDataType_t t,
                                  ncclRedOp_t op, int root, ncclComm_t comm, void *stream)
{
    return submit(2, sb, rb, count, t, (int)op, root, comm, stream);
}

FK_EXPORT ncclResult_t ncclAllGather(const void *sb, void *rb, size_t count, ncclDataType_t t,
                                     ncclComm_t comm, void *stream)
{
    return submit(3, sb, rb, count, t, 0, 0, comm, stream);
}

FK_EXPORT ncclResult_t ncclReduceScatter(const void *sb, void *rb, size_t count, ncclDataType_t t,
                                         ncclRedOp_t op, ncclComm_t comm, void *stream)
{
    return submit(4, sb, rb, count, t, (int)op, 0, comm, stream);
}

FK_EXPORT ncclResult_t ncclSend(const void *sb, size_t count, ncclDataType_t t, int peer,
                                ncclComm_t comm, void *stream)
{
    return submit(5, sb, NULL, count, t, 0, peer, comm, stream);
}

FK_EXPORT ncclResult_t ncclRecv(void *rb, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                void *stream)
{
    return submit(6, NULL, rb, count, t, 0, peer, comm, stream);
}

/* ---- communicators ------------------------------------------------------------------------ */

FK_EXPORT ncclResult_t ncclGetVersion(int *v)
{
    const char *env = getenv("FAKENCCL_VERSION");

    *v = env != NULL ? atoi(env) : NCCL_ABI_VERSION(2, 28, 1);
    return ncclSuccess;
}

FK_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    int fd = open("/dev/urandom", O_RDONLY);

    memset(id, 0, sizeof(*id));
    memcpy(id->internal, "FAKENCCL", 8);
    if (fd < 0 || read(fd, id->internal + 8, 16) != 16) {
        if (fd >= 0)
            close(fd);
        return ncclSystemError;
    }
    close(fd);
    return ncclSuccess;
}

static void comm_free(ncclComm_t comm);

static struct ncclComm *comm_alloc(const char *name, int nranks, int rank)
{
    struct ncclComm *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    snprintf(c->name, sizeof(c->name), "%s", name);
    pthread_mutex_init(&c->qlock, NULL);
    pthread_cond_init(&c->qcond, NULL);
    c->nranks = nranks;
    c->rank = rank;
    drv_bind();
    if (drv_ctx_get != NULL)
        drv_ctx_get(&c->ctx);
    return c;
}

/* Map the communicator's shared memory and wait for every rank (c stays allocated). */
static ncclResult_t comm_join(struct ncclComm *c)
{
    ncclResult_t res = ncclSystemError;
    int fd;

    c->pending = false;
    if ((fd = shm_open(c->name, O_CREAT | O_RDWR, 0600)) < 0)
        return res;
    if (ftruncate(fd, FK_SHM_BYTES) != 0 ||
        (c->shm = mmap(NULL, FK_SHM_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
            MAP_FAILED) {
        close(fd);
        c->shm = NULL;
        return res;
    }
    close(fd);
    c->slots = (uint8_t *)(c->shm + 1);
    c->shm->pids[c->rank] = getpid();
    atomic_fetch_add(&c->shm->joined, 1);
    if ((res = wait_int(c, &c->shm->joined, c->nranks)) != ncclSuccess ||
        (res = barrier(c)) != ncclSuccess)
        goto err_unmap;
    if (c->rank == 0)
        shm_unlink(c->name); /* every rank has it mapped now */
    drv_bind();
    if (drv_alloc != NULL) {
        uint64_t d = 0;

        if (drv_alloc(&d, FK_COMM_BYTES) != 0) {
            res = ncclUnhandledCudaError;
            goto err_unmap;
        }
        c->internal = (void *)(uintptr_t)d;
    }
    return ncclSuccess;
err_unmap:
    munmap(c->shm, FK_SHM_BYTES);
    c->shm = NULL;
    shm_unlink(c->name);
    return res;
}

/* A communicator of nranks named name: now, or at the open group's end. */
static ncclResult_t comm_open(const char *name, int nranks, int rank, ncclComm_t *out)
{
    struct ncclComm *c = comm_alloc(name, nranks, rank);
    ncclResult_t res;

    if (c == NULL)
        return ncclSystemError;
    if (group_depth > 0 && nmade < FK_MAX_MADE) {
        c->pending = true;
        made[nmade++] = c;
        *out = c;
        return ncclSuccess;
    }
    if ((res = comm_join(c)) != ncclSuccess) {
        free(c);
        return res;
    }
    *out = c;
    return ncclSuccess;
}

FK_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id,
                                              int rank, ncclConfig_t *config)
{
    char name[64];

    if (nranks < 1 || nranks > FK_MAX_RANKS || rank < 0 || rank >= nranks ||
        memcmp(id.internal, "FAKENCCL", 8) != 0)
        return ncclInvalidArgument;
    /* A config as rgpu's worker passes one (NCCL 2.18's layout, blocking); minCTAs above
     * maxCTAs is refused, as NCCL refuses it. */
    if (config != NULL &&
        (config->magic != NCCL_CONFIG_MAGIC || config->version != NCCL_ABI_VERSION(2, 18, 0) ||
         config->size < offsetof(ncclConfig_t, splitShare) + sizeof(int) || config->blocking != 1 ||
         (config->minCTAs != NCCL_CONFIG_UNDEF_INT && config->maxCTAs != NCCL_CONFIG_UNDEF_INT &&
          config->minCTAs > config->maxCTAs)))
        return ncclInvalidArgument;
    snprintf(name, sizeof(name), "/fakenccl-");
    for (int i = 0; i < 16; i++)
        snprintf(name + 10 + 2 * i, 3, "%02x", (uint8_t)id.internal[8 + i]);
    return comm_open(name, nranks, rank, comm);
}

FK_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                     ncclConfig_t *config)
{
    struct fk_shm *sh = comm->shm;
    int nranks = 0, rank = 0;
    char name[64];
    ncclResult_t res;

    sh->colors[comm->rank] = color;
    sh->keys[comm->rank] = key;
    if ((res = barrier(comm)) != ncclSuccess)
        return res;
    for (int r = 0; r < comm->nranks; r++)
        if (sh->colors[r] == color) {
            nranks++;
            if (sh->keys[r] < key || (sh->keys[r] == key && r < comm->rank))
                rank++;
        }
    comm->splits++;
    if ((res = barrier(comm)) != ncclSuccess)
        return res;
    *newcomm = NULL;
    if (color == NCCL_SPLIT_NOCOLOR)
        return ncclSuccess;
    snprintf(name, sizeof(name), "%.40s-%d-%d", comm->name, comm->splits, color);
    return comm_open(name, nranks, rank, newcomm);
}

FK_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    return comm != NULL ? ncclSuccess : ncclInvalidArgument;
}

/* The device memory the communicator took after its creation (lazy, its connections). */
static void free_grown(ncclComm_t comm)
{
    if (drv_free == NULL)
        return;
    if (comm->lazy != NULL)
        drv_free((uint64_t)(uintptr_t)comm->lazy);
    comm->lazy = NULL;
    for (int p = 0; p < FK_MAX_RANKS; p++) {
        if (comm->send_mem[p] != NULL)
            drv_free((uint64_t)(uintptr_t)comm->send_mem[p]);
        if (comm->recv_mem[p] != NULL)
            drv_free((uint64_t)(uintptr_t)comm->recv_mem[p]);
        comm->send_mem[p] = comm->recv_mem[p] = NULL;
    }
}

static void comm_free(ncclComm_t comm)
{
    if (comm->internal != NULL && drv_free != NULL)
        drv_free((uint64_t)(uintptr_t)comm->internal);
    free_grown(comm);
    if (comm->shm != NULL)
        munmap(comm->shm, FK_SHM_BYTES);
    free(comm);
}

FK_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (comm == NULL)
        return ncclInvalidArgument;
    device_stop(comm, true);
    comm_free(comm);
    return ncclSuccess;
}

/* Another thread may be waiting inside a collective of comm: it sees the flag and returns, so
 * an aborted communicator's memory is freed only when the process ends. */
static struct ncclComm *aborted_list[64];
static atomic_int naborted;

__attribute__((destructor)) static void free_aborted(void)
{
    for (int i = 0; i < atomic_load(&naborted) && i < 64; i++)
        comm_free(aborted_list[i]);
}

FK_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    int slot;

    if (comm == NULL || atomic_exchange(&comm->aborted, 1) != 0)
        return ncclSuccess;
    device_stop(comm, false); /* its queued operations fail at once, as aborted kernels end */
    if ((slot = atomic_fetch_add(&naborted, 1)) < 64)
        aborted_list[slot] = comm;
    if (comm->internal != NULL && drv_free != NULL)
        drv_free((uint64_t)(uintptr_t)comm->internal);
    comm->internal = NULL;
    free_grown(comm);
    return ncclSuccess;
}

/* A dead peer is noticed by a rank that waits for it (wait_for), as NCCL's proxy notices a
 * connection that breaks under an operation, not by an idle communicator. */
FK_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e)
{
    if (comm == NULL || e == NULL)
        return ncclInvalidArgument;
    *e = (ncclResult_t)atomic_load(&comm->async);
    return ncclSuccess;
}

FK_EXPORT ncclResult_t ncclCommCount(ncclComm_t comm, int *n)
{
    *n = comm->nranks;
    return ncclSuccess;
}

FK_EXPORT ncclResult_t ncclCommUserRank(ncclComm_t comm, int *r)
{
    *r = comm->rank;
    return ncclSuccess;
}

FK_EXPORT ncclResult_t ncclMemAlloc(void **p, size_t n)
{
    uint64_t d = 0;

    drv_bind();
    if (drv_alloc == NULL || drv_alloc(&d, n) != 0)
        return ncclUnhandledCudaError;
    *p = (void *)(uintptr_t)d;
    return ncclSuccess;
}

FK_EXPORT ncclResult_t ncclMemFree(void *p)
{
    drv_bind();
    return drv_free != NULL && drv_free((uint64_t)(uintptr_t)p) == 0 ? ncclSuccess
                                                                     : ncclInvalidArgument;
}

FK_EXPORT ncclResult_t ncclCommRegister(ncclComm_t comm, void *buf, size_t n, void **handle)
{
    *handle = buf;
    return ncclSuccess;
}

FK_EXPORT ncclResult_t ncclCommDeregister(ncclComm_t comm, void *handle)
{
    return handle != NULL ? ncclSuccess : ncclInvalidArgument;
}

FK_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t t,
                                                ncclScalarResidence_t where, ncclComm_t comm)
{
    for (int i = 0; i < FK_MAX_OPS; i++)
        if (comm->premul[i] == 0) {
            double v = t == ncclFloat64   ? *(double *)scalar
                       : t == ncclFloat32 ? *(float *)scalar
                                          : (double)*(int32_t *)scalar;
            comm->premul[i] = v != 0 ? v : 1e-300;
            *op = (ncclRedOp_t)(ncclNumOps + i);
            return ncclSuccess;
        }
    return ncclInvalidUsage;
}

FK_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    if ((int)op < ncclNumOps || (int)op >= ncclNumOps + FK_MAX_OPS)
        return ncclInvalidArgument;
    comm->premul[op - ncclNumOps] = 0;
    return ncclSuccess;
}

/* ---- NCCL 2.28's further calls (absent from libfakenccl_old.so, an older NCCL) ------------- */
#ifndef FK_OLD

FK_EXPORT ncclResult_t ncclAlltoAll(const void *sb, void *rb, size_t count, ncclDataType_t t,
                                    ncclComm_t comm, void *stream)
{
    return submit(7, sb, rb, count, t, 0, 0, comm, stream);
}

FK_EXPORT ncclResult_t ncclGather(const void *sb, void *rb, size_t count, ncclDataType_t t,
                                  int root, ncclComm_t comm, void *stream)
{
    return submit(8, sb, rb, count, t, 0, root, comm, stream);
}

FK_EXPORT ncclResult_t ncclScatter(const void *sb, void *rb, size_t count, ncclDataType_t t,
                                   int root, ncclComm_t comm, void *stream)
{
    return submit(9, sb, rb, count, t, 0, root, comm, stream);
}

/* A window: NCCL's handle, and 64 KiB of device memory the registration takes (charged). */
struct ncclWindow_vidmem {
    uint32_t magic;
    struct ncclComm *comm;
    void *buf;
    uint64_t mem;
};
#define FK_WIN_MAGIC 0x77696e64u

FK_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buf, size_t n,
                                              ncclWindow_t *win, int flags)
{
    struct ncclWindow_vidmem *w;
    ncclResult_t res;

    if (comm == NULL || win == NULL || (flags & ~NCCL_WIN_COLL_SYMMETRIC))
        return ncclInvalidArgument;
    if ((res = barrier(comm)) != ncclSuccess) /* collective, as NCCL's */
        return res;
    if ((w = calloc(1, sizeof(*w))) == NULL)
        return ncclSystemError;
    drv_bind();
    if (drv_alloc == NULL || drv_alloc(&w->mem, 64u << 10) != 0) {
        free(w);
        return ncclUnhandledCudaError;
    }
    w->magic = FK_WIN_MAGIC;
    w->comm = comm;
    w->buf = buf;
    *win = w;
    return ncclSuccess;
}

FK_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    if (win == NULL || win->magic != FK_WIN_MAGIC || win->comm != comm)
        return ncclInvalidArgument; /* rgpu's worker must never pass one NCCL did not give */
    win->magic = 0;
    if (drv_free != NULL)
        drv_free(win->mem);
    free(win);
    return ncclSuccess;
}

/* The ranks left after excluding some (every remaining rank passes the same list). */
FK_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *exclude, int nexclude,
                                      ncclComm_t *newcomm, ncclConfig_t *config, int flags)
{
    int nranks = comm->nranks, rank = comm->rank;
    char name[64];

    if (newcomm == NULL || nexclude < 0 || (flags & ~NCCL_SHRINK_ABORT))
        return ncclInvalidArgument;
    for (int i = 0; i < nexclude; i++) {
        if (exclude[i] == comm->rank || exclude[i] < 0 || exclude[i] >= comm->nranks)
            return ncclInvalidArgument;
        nranks--;
        rank -= exclude[i] < comm->rank;
    }
    comm->splits++;
    snprintf(name, sizeof(name), "%.40s-s%d", comm->name, comm->splits);
    return comm_open(name, nranks, rank, newcomm);
}

FK_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags)
{
    if (comm == NULL || flags != 0)
        return ncclInvalidArgument;
    atomic_store(&comm->revoked, 1); /* its later operations are refused */
    return ncclSuccess;
}

FK_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nids,
                                                ncclUniqueId *ids, ncclConfig_t *config)
{
    if (nids < 1 || ids == NULL)
        return ncclInvalidArgument;
    for (int i = 1; i < nids; i++) /* each id a real one */
        if (memcmp(ids[i].internal, "FAKENCCL", 8) != 0)
            return ncclInvalidArgument;
    return ncclCommInitRankConfig(comm, nranks, ids[nids - 1], rank, config);
}

/* One process's ranks are one node: the LSA team is the whole communicator. */
FK_EXPORT ncclTeam_t ncclTeamLsa(ncclComm_t comm)
{
    return (ncclTeam_t){comm->nranks, comm->rank, 1};
}

FK_EXPORT ncclTeam_t ncclTeamRail(ncclComm_t comm)
{
    return (ncclTeam_t){1, 0, comm->nranks};
}

FK_EXPORT int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank)
{
    return comm->rank + (rank - team.rank) * team.stride;
}
#endif
