/* Data lanes (server/lanes.c says why): on a TCP session, copies of LANE_MIN bytes or more
 * travel over `lanes` extra TCP connections (lanes = N or RGPU_LANES=N, 4 by default, 0 turns
 * them off: on the H100 host 4 lanes moved a 1 GiB pinned copy at 10-13 GiB/s against 3.3-4.1
 * over the session's one connection, bench/run.sh) in LANE_STRIPE stripes, stripe u on lane u % n,
 * each lane with its own thread, while the call itself goes in order on the session's
 * connection. The lanes are connected at the first such copy; if they cannot be, or one
 * breaks, copies go the ordinary way again (a broken lane also ends the session on the
 * server, so the next call reports it).
 *
 * A synchronous lane copy returns once the reply came and every lane is done. An asynchronous
 * one of pinned memory returns once its call is sent, and the lanes move the bytes meanwhile:
 * the worker finishes the copy before it reads its next call, so the reply to any later
 * synchronizing call (a stream or event synchronization, a query, a synchronous copy: the ops
 * flagged `synchronizing` in proto/ops.def) means the worker is done, and that call waits for
 * the client's lanes to finish their part before it returns (lanes_synced, a post-reply hook of
 * the session). Asynchronous copies of pageable memory complete before they return, as in
 * CUDA. The lanes carry one copy at a time: a copy that finds the previous one still moving
 * first fences the session (a synchronous no-op, which also reads any replies the worker waits
 * to write) and waits for it (lanes_fence); so does pinned memory before it is freed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/bulk/bulk.h"
#include "client/objects/objects.h"
#include "common/log.h"
#include "transport/transport.h"

#define LANE_MIN    (32u << 20)
#define LANE_STRIPE (4u << 20)
#define LANES_MAX   16

struct cli_lane {
    struct transport_conn *conn;
    pthread_t thread;
    int index;
    rg_status_t status; /* of its part of the last job */
};

static struct {
    pthread_mutex_t lock; /* one lane copy at a time; setup */
    char addr[128];
    uint8_t secret[32];
    int want, n;
    bool broken; /* could not connect, or a lane failed: no more lane copies */
    struct cli_lane lanes[LANES_MAX];
    pthread_mutex_t job_lock;
    pthread_cond_t job_cond;
    uint64_t gen;
    int busy;
    struct {
        bool send;
        uint8_t *buf;
        size_t len;
    } job;
    uint64_t job_call; /* the wire id of the job's call (on the first session) */
    bool pending;      /* the job's outcome not yet taken (job_lock) */
} lanes = {.lock = PTHREAD_MUTEX_INITIALIZER,
           .job_lock = PTHREAD_MUTEX_INITIALIZER,
           .job_cond = PTHREAD_COND_INITIALIZER};

/* The Welcome's offer (session hook lanes_offered). */
static void lanes_offered(const char *addr, const void *secret, size_t secret_len, int want)
{
    if (addr == NULL || addr[0] == '\0' || secret_len != sizeof(lanes.secret) || want <= 0)
        return;
    snprintf(lanes.addr, sizeof(lanes.addr), "%s", addr);
    memcpy(lanes.secret, secret, sizeof(lanes.secret));
    lanes.want = want < LANES_MAX ? want : LANES_MAX;
}

/* This lane's stripes of the job, sent from or received into the caller's buffer. */
static rg_status_t lane_move(struct cli_lane *ln, bool send, uint8_t *buf, size_t len)
{
    rg_status_t st = RG_OK;

    for (size_t off = (size_t)ln->index * LANE_STRIPE; off < len && st == RG_OK;
         off += (size_t)lanes.n * LANE_STRIPE) {
        size_t n = len - off < LANE_STRIPE ? len - off : LANE_STRIPE;
        struct iovec iov = {buf + off, n};
        st = send ? transport_sendv(ln->conn, &iov, 1) : transport_recv(ln->conn, buf + off, n);
    }
    return st;
}

static void *lane_thread(void *arg)
{
    struct cli_lane *ln = arg;
    uint64_t seen = 0;

    pthread_mutex_lock(&lanes.job_lock);
    for (;;) {
        while (lanes.gen == seen)
            pthread_cond_wait(&lanes.job_cond, &lanes.job_lock);
        seen = lanes.gen;
        pthread_mutex_unlock(&lanes.job_lock);
        ln->status = lane_move(ln, lanes.job.send, lanes.job.buf, lanes.job.len);
        pthread_mutex_lock(&lanes.job_lock);
        if (--lanes.busy == 0)
            pthread_cond_broadcast(&lanes.job_cond);
    }
    return NULL;
}

/* Connect the lanes and start their threads (lanes.lock held). */
static bool lanes_connect(void)
{
    struct transport_opts opts = {.connect_timeout_ms = 5000};
    struct {
        uint8_t secret[32];
        uint32_t index;
    } hello;
    pthread_attr_t attr;

    memcpy(hello.secret, lanes.secret, sizeof(hello.secret));
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (int i = 0; i < lanes.want; i++) {
        struct cli_lane *ln = &lanes.lanes[i];
        struct iovec iov = {&hello, sizeof(hello)};
        hello.index = (uint32_t)i;
        ln->index = i;
        if (transport_tcp_ops.connect(lanes.addr, &opts, &ln->conn) != RG_OK ||
            transport_sendv(ln->conn, &iov, 1) != RG_OK ||
            pthread_create(&ln->thread, &attr, lane_thread, ln) != 0) {
            rg_info("data lanes to %s: lane %d cannot connect; large copies use the session's "
                    "connection",
                    lanes.addr, i);
            lanes.broken = true;
            break;
        }
        lanes.n++;
    }
    pthread_attr_destroy(&attr);
    return !lanes.broken;
}

/* Wait until every lane did its part of the job and take its outcome (job_lock held): the
 * first lane failure, else RG_OK. */
static rg_status_t lanes_wait_locked(void)
{
    rg_status_t st = RG_OK;

    while (lanes.busy > 0)
        pthread_cond_wait(&lanes.job_cond, &lanes.job_lock);
    for (int i = 0; i < lanes.n; i++)
        if (lanes.lanes[i].status != RG_OK)
            st = lanes.lanes[i].status;
    __atomic_store_n(&lanes.pending, false, __ATOMIC_RELEASE);
    return st;
}

/* The lanes stop for good: shut their connections, which ends whatever a lane waits on. */
static void lanes_break(void)
{
    lanes.broken = true;
    for (int i = 0; i < lanes.n; i++)
        transport_shutdown(lanes.lanes[i].conn);
}

static bool lanes_pending(void)
{
    return __atomic_load_n(&lanes.pending, __ATOMIC_ACQUIRE);
}

/* Wait for the lane copy still moving bytes if its call went out at or before the call with
 * wire id last (CUDA_ERROR_DEVICE_UNAVAILABLE if a lane failed; lost: the session is gone, so
 * the lanes are shut first). */
static CUresult lanes_settle(uint64_t last, bool lost)
{
    rg_status_t st = RG_OK;

    if (!lanes_pending())
        return CUDA_SUCCESS;
    pthread_mutex_lock(&lanes.job_lock);
    if (lanes.pending && lanes.job_call <= last) {
        if (lost)
            lanes_break(); /* the worker may never move the bytes: do not wait for it */
        st = lanes_wait_locked();
    }
    pthread_mutex_unlock(&lanes.job_lock);
    if (st == RG_OK)
        return CUDA_SUCCESS;
    lanes_break();
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

/* Fence the first session and wait for the lane copy sent before the fence. A fence that
 * could not be sent (the goodbye went at exit, a forked child) waits for nothing. */
static CUresult lanes_fence(void)
{
    uint64_t last;
    CUresult res, lanes_res;

    pthread_mutex_lock(&lanes.job_lock);
    last = lanes.job_call;
    pthread_mutex_unlock(&lanes.job_lock);
    res = cli_session_fence(NULL, cli_ctx_current_id());
    if (res != CUDA_SUCCESS && res != CUDA_ERROR_DEVICE_UNAVAILABLE)
        return res;
    lanes_res = lanes_settle(last, res != CUDA_SUCCESS);
    return res == CUDA_SUCCESS ? lanes_res : res;
}

void cli_lanes_quiesce(void)
{
    if (lanes_pending())
        lanes_fence();
}

struct lanes_post {
    bool send, posted;
    uint8_t *buf;
    size_t len;
    const struct cli_call *call;
};

/* The copy's call goes out now (the session's lock held): the lanes start its job. */
static void lanes_post(void *arg)
{
    struct lanes_post *p = arg;

    pthread_mutex_lock(&lanes.job_lock);
    lanes.job.send = p->send;
    lanes.job.buf = p->buf;
    lanes.job.len = p->len;
    lanes.busy = lanes.n;
    lanes.gen++;
    lanes.job_call = p->call->id;
    __atomic_store_n(&lanes.pending, true, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&lanes.job_cond);
    pthread_mutex_unlock(&lanes.job_lock);
    p->posted = true;
}

CUresult cli_lanes_copy(bool htod, CUdeviceptr dptr, void *host, size_t n, uint64_t stream,
                        bool async)
{
    struct lanes_post post = {.send = htod, .buf = host, .len = n};
    struct cli_call call = {
        CLI_ARGS_AS(htod ? PROTO_OP_MEMCPY_HTOD_LANES : PROTO_OP_MEMCPY_DTOH_LANES,
                    MEMCPY_HTOD_LANES, .dptr = dptr, .size = n, .stream = stream,
                    .stripe = LANE_STRIPE),
        .on_send = lanes_post, .on_send_arg = &post};
    CUresult res = CUDA_SUCCESS;

    post.call = &call;
    if (n < LANE_MIN || lanes.want == 0 || lanes.broken || cli_session_rdma_conn() != NULL)
        return CLI_LANES_NOT_TAKEN;
    async = async && cli_host_pinned(host, n);
    pthread_mutex_lock(&lanes.lock);
    if (lanes.broken || (lanes.n == 0 && !lanes_connect())) {
        pthread_mutex_unlock(&lanes.lock);
        return CLI_LANES_NOT_TAKEN;
    }
    if (lanes_pending()) /* the previous copy still moves: its end comes before the reply */
        res = lanes_fence();
    call.a.MEMCPY_HTOD_LANES.async = async;
    call.a.MEMCPY_HTOD_LANES.nlanes = (uint64_t)lanes.n;
    /* Synchronous: settled when it returns (the lane ops synchronize: lanes_synced). */
    if (res == CUDA_SUCCESS)
        res = async ? cli_call_async(&call) : cli_call_sync(&call);
    if (post.posted && res == CUDA_ERROR_DEVICE_UNAVAILABLE)
        lanes_settle(UINT64_MAX, true);
    pthread_mutex_unlock(&lanes.lock);
    return res;
}

/* A synchronizing call's reply came (post-reply hook): the lane copies sent up to it are done
 * on the worker; the client's lanes finish theirs now. The lanes serve the first session. A lane
 * failure is the call's outcome, before the call's own. */
static CUresult lanes_synced(const struct cli_synced *sync, CUresult res)
{
    CUresult lanes_res;

    if (!cli_session_is_first(sync->sess))
        return res;
    lanes_res = lanes_settle(sync->call->id, sync->lost);
    return lanes_res != CUDA_SUCCESS ? lanes_res : res;
}

__attribute__((constructor)) static void lanes_hooks(void)
{
    static const struct cli_session_hooks hooks = {
        .lanes_offered = lanes_offered,
    };

    cli_session_set_hooks(&hooks);
    cli_session_on_synced(CLI_SYNCED_LANES, lanes_synced);
}
