/* Data lanes: extra TCP connections of a session that carry the bytes of large copies in
 * parallel. One TCP stream is bound by the one core that copies its bytes (about 4.5 GiB/s on
 * the H100 host's loopback); several streams, each with its own thread on both ends, are not.
 *
 * The worker offers a listener in the Welcome (lane_addr, lane_secret); the client connects its
 * lanes when it first needs them, each sending the secret and its index. A copy of
 * MEMCPY_HTOD_LANES / MEMCPY_DTOH_LANES is cut in stripes: stripe u travels on lane
 * u % nlanes, in order. Each lane thread moves its stripes between its connection and two
 * pinned staging buffers, and copies them on its own stream, which first waits for the work
 * queued before the copy on the call's stream. The reply goes after every lane finished, and
 * the copy is complete on the device by then, so later work on any stream sees it. A lane that
 * fails ends the session: its stream of stripes cannot be resynchronized. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "server/lanes.h"
#include "transport/side_listener.h"
#include "transport/transport.h"

#define LANE_ACCEPT_MS  10000
#define LANE_HELLO_MS   2000 /* for one connection's hello (its secret and index) */
#define LANE_SECRET_LEN 32
#define LANE_STRIPE_MIN (64u << 10)
#define LANE_STRIPE_MAX (16u << 20)

struct lane {
    struct srv_lanes *set;
    int index;
    struct transport_conn *conn;
    pthread_t thread;
    void *staging[2];
    size_t staging_len;
    size_t staging_most; /* the most it held (both chunks), for the teardown log */
    CUresult result;
};

struct lane_job {
    bool htod;
    CUdeviceptr dptr;
    size_t len, stripe;
    CUcontext ctx;
    CUevent after; /* recorded on the call's stream */
};

struct srv_lanes {
    struct srv_session *s;
    struct transport_side_listener *listener; /* until the lanes connected */
    int n;                                    /* lanes connected and their threads started */
    struct lane lanes[SRV_LANES_MAX];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t job_gen; /* a new job for every lane */
    int busy;         /* lanes still working on it */
    bool stop;
    struct lane_job job;
    uint64_t copies, bytes;
    size_t staging_most; /* the most pinned staging its lanes held (teardown log) */
};

/* The lanes component's state (server/components.def). */
static struct srv_lanes *lanes_of(struct srv_session *s)
{
    return srv_component_state(s, SRV_COMP_LANES);
}

void srv_lanes_offer(struct srv_session *s, Rgpu__Welcome *w)
{
    struct srv_lanes *L = lanes_of(s);
    char addr[128], what[64];

    if (L == NULL || transport_local_any_port(transport_fd(s->conn), addr, sizeof(addr)) != RG_OK)
        return;
    snprintf(what, sizeof(what), "session %llu: a data lane", (unsigned long long)s->id);
    if (transport_side_open(&(struct transport_side_params){.addr = addr,
                                                            .secret_len = LANE_SECRET_LEN,
                                                            .tag_len = sizeof(uint32_t),
                                                            .hello_ms = LANE_HELLO_MS,
                                                            .what = what},
                            &L->listener) != RG_OK)
        return;
    w->lane_addr = (char *)transport_side_addr(L->listener);
    w->lane_secret =
        (ProtobufCBinaryData){LANE_SECRET_LEN, (uint8_t *)transport_side_secret(L->listener)};
}

struct lanes_taking {
    struct srv_lanes *L;
    int n;
};

/* A connection that presented the secret names its index (its tag): taken if it is one of the
 * n and not taken yet. */
static bool lane_take(void *arg, struct transport_conn *conn, const uint8_t *tag)
{
    struct lanes_taking *t = arg;
    uint32_t index;

    memcpy(&index, tag, sizeof(index));
    if (index >= (uint32_t)t->n || t->L->lanes[index].conn != NULL)
        return false;
    t->L->lanes[index].conn = conn;
    return true;
}

/* Accept n lanes, each proving the secret and naming its index, within LANE_ACCEPT_MS. */
static rg_status_t lanes_accept(struct srv_lanes *L, int n)
{
    struct lanes_taking t = {L, n};

    return transport_side_accept(L->listener, n, LANE_ACCEPT_MS, -1, lane_take, &t);
}

static CUresult lane_staging(struct lane *ln, size_t stripe)
{
    struct srv_driver *drv = &ln->set->s->drv;
    CUresult res = CUDA_SUCCESS;

    if (ln->staging_len >= stripe)
        return CUDA_SUCCESS;
    for (int k = 0; k < 2; k++) {
        if (ln->staging[k] != NULL)
            drv->cuMemFreeHost(ln->staging[k]);
        ln->staging[k] = NULL;
    }
    ln->staging_len = 0;
    for (int k = 0; k < 2 && res == CUDA_SUCCESS; k++)
        res = drv->cuMemHostAlloc(&ln->staging[k], stripe, CU_MEMHOSTALLOC_PORTABLE);
    if (res == CUDA_SUCCESS)
        ln->staging_len = stripe;
    if (res == CUDA_SUCCESS && 2 * stripe > ln->staging_most)
        ln->staging_most = 2 * stripe;
    return res;
}

/* Stripe number i of this lane: its offset and length, false past the end. */
static bool lane_stripe(const struct lane *ln, const struct lane_job *j, size_t i, size_t *off,
                        size_t *len)
{
    size_t u = (size_t)ln->index + i * (size_t)ln->set->n;

    if (u >= (j->len + j->stripe - 1) / j->stripe)
        return false;
    *off = u * j->stripe;
    *len = j->len - *off < j->stripe ? j->len - *off : j->stripe;
    return true;
}

/* Host to device: receive stripe i into staging[i % 2] once its previous copy is done, copy it
 * on st. After a driver error the stripes are still read, so the lane stays in step. */
static CUresult lane_htod(struct lane *ln, const struct lane_job *j, CUstream st, CUevent ev[2],
                          CUresult res, bool *io_failed)
{
    struct srv_driver *drv = &ln->set->s->drv;
    size_t off, len;

    for (size_t i = 0; lane_stripe(ln, j, i, &off, &len); i++) {
        int k = (int)(i & 1);
        if (res == CUDA_SUCCESS && i >= 2)
            res = drv->cuEventSynchronize(ev[k]);
        if (res != CUDA_SUCCESS) {
            if (proto_discard(ln->conn, len) != RG_OK)
                return *io_failed = true, CUDA_ERROR_DEVICE_UNAVAILABLE;
            continue;
        }
        if (transport_recv(ln->conn, ln->staging[k], len) != RG_OK)
            return *io_failed = true, CUDA_ERROR_DEVICE_UNAVAILABLE;
        res = drv->cuMemcpyHtoDAsync(j->dptr + off, ln->staging[k], len, st);
        if (res == CUDA_SUCCESS)
            res = drv->cuEventRecordWithFlags(ev[k], st, 0);
    }
    return res == CUDA_SUCCESS ? drv->cuStreamSynchronize(st) : res;
}

static rg_status_t send_zeros(struct transport_conn *c, size_t len)
{
    static const uint8_t zeros[65536];
    rg_status_t st = RG_OK;

    for (size_t n; len > 0 && st == RG_OK; len -= n) {
        struct iovec iov = {(void *)zeros, n = len < sizeof(zeros) ? len : sizeof(zeros)};
        st = transport_sendv(c, &iov, 1);
    }
    return st;
}

/* Device to host: stripe i+1 is copied while stripe i is sent. After a driver error zeros go
 * in place of the data, so the lane stays in step; the reply carries the error. */
static CUresult lane_dtoh(struct lane *ln, const struct lane_job *j, CUstream st, CUevent ev[2],
                          CUresult res, bool *io_failed)
{
    struct srv_driver *drv = &ln->set->s->drv;
    size_t off, len, noff, nlen;
    bool more = lane_stripe(ln, j, 0, &off, &len);

    if (more && res == CUDA_SUCCESS)
        res = drv->cuMemcpyDtoHAsync(ln->staging[0], j->dptr + off, len, st);
    if (more && res == CUDA_SUCCESS)
        res = drv->cuEventRecordWithFlags(ev[0], st, 0);
    for (size_t i = 0; more; i++, off = noff, len = nlen) {
        int k = (int)(i & 1);
        struct iovec iov = {ln->staging[k], len};
        more = lane_stripe(ln, j, i + 1, &noff, &nlen);
        if (more && res == CUDA_SUCCESS)
            res = drv->cuMemcpyDtoHAsync(ln->staging[k ^ 1], j->dptr + noff, nlen, st);
        if (more && res == CUDA_SUCCESS)
            res = drv->cuEventRecordWithFlags(ev[k ^ 1], st, 0);
        if (res == CUDA_SUCCESS)
            res = drv->cuEventSynchronize(ev[k]);
        if ((res == CUDA_SUCCESS ? transport_sendv(ln->conn, &iov, 1)
                                 : send_zeros(ln->conn, len)) != RG_OK)
            return *io_failed = true, CUDA_ERROR_DEVICE_UNAVAILABLE;
    }
    return res;
}

/* One lane's part of the job: its own stream waits for the work before the copy. */
static void lane_run(struct lane *ln, const struct lane_job *j)
{
    struct srv_driver *drv = &ln->set->s->drv;
    CUstream st = NULL;
    CUevent ev[2] = {NULL, NULL};
    bool io_failed = false;
    CUresult res = j->after != NULL ? drv->cuCtxSetCurrent(j->ctx) : CUDA_ERROR_INVALID_VALUE;

    if (res == CUDA_SUCCESS)
        res = lane_staging(ln, j->stripe);
    if (res == CUDA_SUCCESS)
        res = drv->cuStreamCreateWithPriority(&st, CU_STREAM_NON_BLOCKING, 0);
    for (int k = 0; k < 2 && res == CUDA_SUCCESS; k++)
        res = drv->cuEventCreate(&ev[k], CU_EVENT_DISABLE_TIMING);
    if (res == CUDA_SUCCESS)
        res = drv->cuStreamWaitEvent(st, j->after, 0);
    res = j->htod ? lane_htod(ln, j, st, ev, res, &io_failed)
                  : lane_dtoh(ln, j, st, ev, res, &io_failed);
    for (int k = 0; k < 2; k++)
        if (ev[k] != NULL)
            drv->cuEventDestroy(ev[k]);
    if (st != NULL)
        drv->cuStreamDestroy(st);
    ln->result = io_failed ? CUDA_ERROR_DEVICE_UNAVAILABLE : res;
    for (int i = 0; io_failed && i < ln->set->n; i++) /* the others would wait forever */
        transport_shutdown(ln->set->lanes[i].conn);
}

static void *lane_thread(void *arg)
{
    struct lane *ln = arg;
    struct srv_lanes *L = ln->set;
    uint64_t seen = 0;

    pthread_mutex_lock(&L->lock);
    for (;;) {
        while (!L->stop && L->job_gen == seen)
            pthread_cond_wait(&L->cond, &L->lock);
        if (L->stop)
            break;
        seen = L->job_gen;
        pthread_mutex_unlock(&L->lock);
        lane_run(ln, &L->job);
        pthread_mutex_lock(&L->lock);
        if (--L->busy == 0)
            pthread_cond_broadcast(&L->cond);
    }
    pthread_mutex_unlock(&L->lock);
    return NULL;
}

/* Connect the client's n lanes and start their threads, the first time. */
static rg_status_t lanes_start(struct srv_lanes *L, int n)
{
    if (L->n > 0)
        return L->n == n ? RG_OK : RG_ERR_PROTO;
    if (L->listener == NULL || n < 1 || n > SRV_LANES_MAX || lanes_accept(L, n) != RG_OK)
        return RG_ERR_PROTO;
    transport_side_close(L->listener);
    L->listener = NULL;
    /* L->n counts the lane threads (the teardown joins them; it closes every connection) */
    for (int i = 0; i < n; i++) {
        L->lanes[i] = (struct lane){.set = L, .index = i, .conn = L->lanes[i].conn};
        if (pthread_create(&L->lanes[i].thread, NULL, lane_thread, &L->lanes[i]) != 0)
            return RG_ERR_NOMEM;
        L->n = i + 1;
    }
    rg_info("session %llu: %d data lanes connected", (unsigned long long)L->s->id, n);
    return RG_OK;
}

/* Give every lane the job and wait until all are done; the first lane error, or CUDA_SUCCESS. */
static CUresult lanes_run(struct srv_lanes *L, const struct lane_job *j, bool *io_failed)
{
    CUresult res = CUDA_SUCCESS;

    pthread_mutex_lock(&L->lock);
    L->job = *j;
    L->busy = L->n;
    L->job_gen++;
    pthread_cond_broadcast(&L->cond);
    while (L->busy > 0)
        pthread_cond_wait(&L->cond, &L->lock);
    pthread_mutex_unlock(&L->lock);
    for (int i = 0; i < L->n; i++) {
        if (L->lanes[i].result == CUDA_ERROR_DEVICE_UNAVAILABLE)
            *io_failed = true;
        if (res == CUDA_SUCCESS)
            res = L->lanes[i].result;
    }
    return res;
}

/* MEMCPY_HTOD_LANES / MEMCPY_DTOH_LANES [dptr, size, stream, async, nlanes, stripe]. A copy
 * that cannot run still moves its bytes over the lanes (read and dropped, or zeros), so they
 * stay in step, and answers the error. */
CUresult srv_op_lanes_copy(struct srv_session *s, struct srv_call *call)
{
    const struct proto_args_MEMCPY_HTOD_LANES *a = SRV_ARGS(call, MEMCPY_HTOD_LANES);
    struct srv_lanes *L = lanes_of(s);
    struct lane_job j = {.htod = call->msg->op == PROTO_OP_MEMCPY_HTOD_LANES,
                         .dptr = a->dptr,
                         .len = a->size,
                         .stripe = a->stripe};
    CUstream st;
    CUresult res = CUDA_SUCCESS, lane_res;
    bool io_failed = false;

    if (L == NULL || call->hdr->bulk_len != 0 || j.stripe < LANE_STRIPE_MIN ||
        j.stripe > LANE_STRIPE_MAX || lanes_start(L, (int)a->nlanes) != RG_OK) {
        snprintf(call->why, sizeof(call->why), "a lane copy without its lanes (%llu asked)",
                 (unsigned long long)a->nlanes);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (call->ctx_res != CUDA_SUCCESS)
        res = call->ctx_res;
    else if (!srv_stream(s, a->stream, &st))
        res = CUDA_ERROR_INVALID_HANDLE;
    if (res == CUDA_SUCCESS)
        res = s->drv.cuCtxGetCurrent(&j.ctx);
    if (res == CUDA_SUCCESS)
        res = s->drv.cuEventCreate(&j.after, CU_EVENT_DISABLE_TIMING);
    if (res == CUDA_SUCCESS &&
        (res = s->drv.cuEventRecordWithFlags(j.after, st, 0)) != CUDA_SUCCESS) {
        s->drv.cuEventDestroy(j.after);
        j.after = NULL;
    }
    lane_res = lanes_run(L, &j, &io_failed); /* without j.after the lanes only keep in step */
    if (res == CUDA_SUCCESS)
        res = lane_res;
    if (j.after != NULL)
        s->drv.cuEventDestroy(j.after);
    if (io_failed)
        snprintf(call->why, sizeof(call->why), "a data lane failed");
    L->copies++;
    L->bytes += j.len;
    return res;
}

void srv_lanes_staging_release(struct srv_session *s)
{
    struct srv_lanes *L = lanes_of(s);

    for (int i = 0; L != NULL && i < L->n; i++) {
        for (int k = 0; k < 2; k++)
            if (L->lanes[i].staging[k] != NULL)
                s->drv.cuMemFreeHost(L->lanes[i].staging[k]);
        L->lanes[i].staging[0] = L->lanes[i].staging[1] = NULL;
        L->lanes[i].staging_len = 0;
    }
}

size_t srv_lanes_staging_most(struct srv_session *s)
{
    struct srv_lanes *L = lanes_of(s);

    return L != NULL ? L->staging_most : 0;
}

static rg_status_t lanes_init(struct srv_session *s, void *state)
{
    struct srv_lanes *L = state;

    L->s = s;
    if (pthread_mutex_init(&L->lock, NULL) != 0)
        return RG_ERR_NOMEM;
    if (pthread_cond_init(&L->cond, NULL) != 0) {
        pthread_mutex_destroy(&L->lock);
        return RG_ERR_NOMEM;
    }
    return RG_OK;
}

/* Stop the lane threads (before the memory they copy to goes), close the lanes, free their
 * staging. */
static void lanes_teardown(struct srv_session *s, void *state)
{
    struct srv_lanes *L = state;

    pthread_mutex_lock(&L->lock);
    L->stop = true;
    pthread_cond_broadcast(&L->cond);
    pthread_mutex_unlock(&L->lock);
    for (int i = 0; i < L->n; i++) {
        pthread_join(L->lanes[i].thread, NULL);
        L->staging_most += L->lanes[i].staging_most;
    }
    if (L->copies > 0)
        rg_info("session %llu: %llu copies over %d data lanes, %.1f MiB", (unsigned long long)s->id,
                (unsigned long long)L->copies, L->n, L->bytes / 1048576.0);
    srv_lanes_staging_release(s);
    for (int i = 0; i < SRV_LANES_MAX; i++)
        if (L->lanes[i].conn != NULL)
            transport_close(L->lanes[i].conn);
    transport_side_close(L->listener);
    L->listener = NULL;
    pthread_mutex_destroy(&L->lock);
    pthread_cond_destroy(&L->cond);
}

const struct srv_component srv_lanes_component = {.name = "lanes",
                                                  .state_size = sizeof(struct srv_lanes),
                                                  .init = lanes_init,
                                                  .teardown = lanes_teardown};
