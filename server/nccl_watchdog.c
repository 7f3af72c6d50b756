/* The watchdog of a session's communicators: a thread that wakes every 50 ms while the session
 * has communicators and aborts (ncclCommAbort, which releases kernels waiting for a peer) one
 *   - whose async error is set (a peer died, the network failed: NCCL's remote or system error),
 *   - with a collective in flight while a peer rank's worker on this host is gone (its liveness
 *     file is left unlocked: the process died, or its session ended without destroying the
 *     communicator) and still in flight NCCL_PEER_GRACE_MS later — NCCL itself does not notice a
 *     dead peer across NVLink or PCIe, whose kernels spin on device memory,
 *   - with a collective (or a group end) unfinished for nccl_timeout,
 * and every communicator of the session when its client is gone (the connection hung up) while
 * the session's thread is held inside a call, so that call returns and the session ends.
 *
 * Liveness files: while a rank's communicator lives, its worker holds an flock on
 * NCCL_LIVE_DIR/<first 16 bytes of the communicator's identity in hex>.<rank>. A graceful end
 * (destroy, finalize-then-destroy, abort by the application) unlinks the file first; a session
 * that ends with the communicator alive (the client died or exited) leaves it, unlocked, and the
 * kernel drops the lock of a worker that dies. Peers on other hosts have no file here: across
 * hosts NCCL's network transport reports the dead peer as an async error. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "server/nccl_internal.h"
#include "transport/transport.h"

#define NCCL_LIVE_DIR      "/dev/shm/rgpu-nccl"
#define NCCL_PEER_GRACE_MS 1000 /* a collective still in flight this long after a peer went */
#define NCCL_LIVE_STALE_S  (24 * 3600) /* unlocked files older than this are swept */
#define TICK_MS            50

/* ---- liveness files ---------------------------------------------------------------------- */

static void live_name(char *out, size_t cap, const uint8_t ident[RG_SHA256_LEN], int rank)
{
    char hex[2 * RG_SHA256_LEN + 1];

    rg_sha256_hex(ident, hex);
    snprintf(out, cap, NCCL_LIVE_DIR "/%.32s.%d", hex, rank);
}

/* Unlocked files of long ago (their communicators' ranks all gone): removed. */
static void live_sweep(void)
{
    static bool swept;
    DIR *d;
    struct dirent *e;
    time_t now = time(NULL);

    if (swept || (d = opendir(NCCL_LIVE_DIR)) == NULL)
        return;
    swept = true;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        int fd;

        if (e->d_name[0] == '.' ||
            (fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
            continue;
        if (fstat(fd, &st) == 0 && now - st.st_mtime > NCCL_LIVE_STALE_S &&
            flock(fd, LOCK_EX | LOCK_NB) == 0)
            unlinkat(dirfd(d), e->d_name, 0);
        close(fd);
    }
    closedir(d);
}

int nccl_live_open(const uint8_t ident[RG_SHA256_LEN], int rank)
{
    char path[128];
    int fd;

    if (mkdir(NCCL_LIVE_DIR, 0700) != 0 && errno != EEXIST) {
        rg_debug("nccl: no liveness files (%s: %m): dead peers are found by NCCL or "
                 "nccl_timeout only",
                 NCCL_LIVE_DIR);
        return -1;
    }
    live_sweep();
    live_name(path, sizeof(path), ident, rank);
    if ((fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
        return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) { /* another live worker has this rank: not ours */
        close(fd);
        return -1;
    }
    return fd;
}

void nccl_live_close(int fd, const uint8_t ident[RG_SHA256_LEN], int rank, bool graceful)
{
    char path[128];

    if (graceful) {
        live_name(path, sizeof(path), ident, rank);
        unlink(path);
    }
    close(fd);
}

/* Whether a peer rank of r on this host is gone: its file is there and nobody holds it. */
static bool peer_gone(const struct nccl_rec *r)
{
    char path[128];
    bool gone = false;

    for (int p = 0; p < r->nranks && !gone; p++) {
        int fd;

        if (p == r->rank)
            continue;
        live_name(path, sizeof(path), r->ident, p);
        if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
            continue; /* on another host, or not made yet */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            gone = true;
            unlink(path);
        }
        close(fd);
    }
    return gone;
}

/* ---- the watchdog ------------------------------------------------------------------------ */

bool nccl_capturing(struct srv_session *s, CUstream st)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;

    return s->drv.cuStreamGetCaptureInfo(st, &status, NULL, NULL, NULL, NULL, NULL) ==
               CUDA_SUCCESS &&
           status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void nccl_rec_mark(struct srv_session *s, struct nccl_rec *r, CUstream st)
{
    /* One event pending at a time: recording after each collective would cost a driver call
     * per collective. A collective issued while it is still pending on the same stream makes
     * the record stale: the event may complete before that collective does (the watchdog only
     * looks every TICK_MS), and a stuck last collective would go unseen. Before the session
     * next waits for the GPU the event is recorded again (srv_nccl_before_wait). Nothing is
     * recorded into a graph being captured (it would become a node of the application's
     * graph). */
    if (r->comm == NULL || r->done == NULL)
        return;
    if (r->recorded_ms != 0 && r->done_stream == st) {
        r->stale = true;
        atomic_store(&nccl_state(s)->stale, true);
        return;
    }
    if (nccl_capturing(s, st))
        return;
    if (s->drv.cuEventRecordWithFlags(r->done, st, 0) == CUDA_SUCCESS) {
        r->recorded_ms = nccl_now_ms();
        r->done_stream = st;
        r->stale = false;
    }
}

void srv_nccl_before_wait(struct srv_session *s)
{
    struct srv_nccl *n = nccl_state(s);
    CUcontext saved = NULL;

    if (n == NULL || !atomic_load_explicit(&n->stale, memory_order_relaxed) ||
        !atomic_exchange(&n->stale, false))
        return;
    s->drv.cuCtxGetCurrent(&saved);
    pthread_mutex_lock(&n->lock);
    for (size_t i = 0; i < n->nrecs; i++) {
        struct nccl_rec *r = &n->recs[i];

        if (!r->stale || r->comm == NULL || r->done == NULL ||
            s->drv.cuCtxSetCurrent(r->ctx) != CUDA_SUCCESS || nccl_capturing(s, r->done_stream))
            continue;
        if (s->drv.cuEventRecordWithFlags(r->done, r->done_stream, 0) == CUDA_SUCCESS) {
            r->recorded_ms = nccl_now_ms();
            r->stale = false;
        }
    }
    pthread_mutex_unlock(&n->lock);
    s->drv.cuCtxSetCurrent(saved);
}

static bool in_flight(struct srv_nccl *n, struct nccl_rec *r)
{
    if (r->in_call_ms != 0)
        return true;
    if (r->recorded_ms == 0 || r->done == NULL || n->s->drv.cuCtxSetCurrent(r->ctx) != CUDA_SUCCESS)
        return false;
    if (n->s->drv.cuEventQuery(r->done) != CUDA_ERROR_NOT_READY)
        r->recorded_ms = 0;
    return r->recorded_ms != 0;
}

static void watch_one(struct srv_nccl *n, struct nccl_rec *r, uint64_t now)
{
    ncclResult_t e = ncclSuccess;
    bool busy;

    if (nccl_lib.CommGetAsyncError(r->comm, &e) == ncclSuccess && e != ncclSuccess &&
        e != ncclInProgress) {
        rg_error("nccl: communicator %llu failed (NCCL error %d: a peer died or the network "
                 "failed); aborting it",
                 (unsigned long long)r->id, (int)e);
        nccl_rec_abort(n, r, e);
        return;
    }
    busy = in_flight(n, r);
    if (busy && r->peer_gone_ms == 0 && r->live_fd >= 0 && peer_gone(r))
        r->peer_gone_ms = now;
    if (busy && r->peer_gone_ms != 0 && now - r->peer_gone_ms >= NCCL_PEER_GRACE_MS) {
        rg_error("nccl: communicator %llu: a peer rank's worker on this host is gone and a "
                 "collective still waits for it; aborting it",
                 (unsigned long long)r->id);
        nccl_rec_abort(n, r, ncclRemoteError);
        return;
    }
    if (r->in_call_ms != 0 && now - r->in_call_ms > nccl_timeout_ms) {
        rg_error("nccl: a collective of communicator %llu has not returned for %u s "
                 "(nccl_timeout); aborting it",
                 (unsigned long long)r->id, nccl_timeout_ms / 1000);
        nccl_rec_abort(n, r, ncclSystemError);
        return;
    }
    if (busy && r->recorded_ms != 0 && now - r->recorded_ms > nccl_timeout_ms) {
        rg_error("nccl: communicator %llu: its collectives have not finished for %u s "
                 "(nccl_timeout); aborting it",
                 (unsigned long long)r->id, nccl_timeout_ms / 1000);
        nccl_rec_abort(n, r, ncclSystemError);
    }
}

/* The client is gone: its connection hung up (read side shut down by the peer). */
static bool client_gone(struct srv_session *s)
{
    struct transport_conn *c = s->tcp_ctl != NULL ? s->tcp_ctl : s->conn;
    struct pollfd p = {.fd = c != NULL ? transport_fd(c) : -1, .events = POLLRDHUP};

    return p.fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

void *nccl_watchdog_main(void *arg)
{
    struct srv_nccl *n = arg;
    const struct timespec tick = {0, TICK_MS * 1000 * 1000};
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
    bool told = false;

    /* This thread queries events while the session's thread may be capturing a graph in global
     * mode (PyTorch's default), where such calls from another thread would invalidate the
     * capture; in relaxed mode they do not. */
    n->s->drv.cuThreadExchangeStreamCaptureMode(&relaxed);
    for (;;) {
        pthread_mutex_lock(&n->lock);
        if (n->stop) {
            pthread_mutex_unlock(&n->lock);
            return NULL;
        }
        uint64_t now = nccl_now_ms();
        /* A group's end may wait for peers of any of the session's communicators. */
        bool group_stuck = n->group_end_ms != 0 && now - n->group_end_ms > nccl_timeout_ms;
        bool gone = false;

        for (size_t i = 0; i < n->nrecs && !gone; i++)
            gone = n->recs[i].comm != NULL && client_gone(n->s); /* only with one to abort */

        if (group_stuck)
            rg_error("nccl: an ncclGroupEnd has not returned for %u s (nccl_timeout); aborting "
                     "the session's communicators",
                     nccl_timeout_ms / 1000);
        if (gone && !told) {
            told = true;
            rg_warn("nccl: the client is gone; aborting the session's communicators");
        }
        for (size_t i = 0; i < n->nrecs; i++)
            if (n->recs[i].comm != NULL && (group_stuck || gone))
                nccl_rec_abort(n, &n->recs[i], gone ? ncclRemoteError : ncclSystemError);
            else if (n->recs[i].comm != NULL)
                watch_one(n, &n->recs[i], now);
        if (group_stuck)
            n->group_end_ms = 0;
        pthread_mutex_unlock(&n->lock);
        nanosleep(&tick, NULL);
    }
}
