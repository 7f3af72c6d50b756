/* The ordered stream of calls on the session's connection: synchronous calls wait for their
 * reply; asynchronous ones are coalesced into batches (written at BATCH_FLUSH_AT bytes, at the
 * next synchronous call, or BATCH_DELAY_US after the first, by the flusher thread), and their
 * failures (AsyncError frames) are returned by the next synchronous call, as CUDA returns errors
 * of asynchronous work at the next synchronizing call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "client/session/session.h"
#include "common/array_grow.h"
#include "common/config.h"
#include "transport/rdma.h"

/* Asynchronous calls are coalesced: written when BATCH_FLUSH_AT bytes are pending, at the next
 * synchronous call, or BATCH_DELAY_US after the first one, whichever comes first. */
#define BATCH_SIZE     (64u << 10)
#define BATCH_FLUSH_AT (32u << 10)
#define BATCH_DELAY_US 50
/* Deferred DtoH replies carrying more than this are read before anything else is sent. */
#define DEFERRED_DRAIN_AT (16u << 10)

/* Write the coalesced frames (lock held). */
CUresult cli_batch_flush(struct cli_session *s)
{
    struct iovec iov = {s->batch, s->batch_len};
    rg_status_t status;

    if (s->batch_len == 0 || s->dead)
        return s->dead ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_SUCCESS;
    s->batch_len = 0;
    status = transport_sendv(s->conn, &iov, 1);
    return status == RG_OK ? CUDA_SUCCESS : cli_session_lost(s, "send", status);
}

/* Bounds how long an asynchronous call may wait in the batch. */
static void *batch_flusher(void *arg)
{
    struct cli_session *s = arg;

    pthread_mutex_lock(&s->lock);
    while (!s->dead) {
        if (s->batch_len == 0) {
            pthread_cond_wait(&s->batch_cond, &s->lock);
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        usleep(BATCH_DELAY_US);
        pthread_mutex_lock(&s->lock);
        cli_batch_flush(s);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

CUresult cli_batch_start(struct cli_session *s)
{
    pthread_t thread;
    pthread_attr_t attr;
    int rc;

    if ((s->batch = malloc(BATCH_SIZE)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&thread, &attr, batch_flusher, s);
    pthread_attr_destroy(&attr);
    return rc == 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}

/* ---- the call stream -------------------------------------------------------------------- */

CUresult cli_session_lost(struct cli_session *s, const char *what, rg_status_t status)
{
    if (!s->dead) {
        rg_error("lost the gpu-server at %s (%s: %s); every CUDA call now fails with "
                 "CUDA_ERROR_DEVICE_UNAVAILABLE",
                 s->server, what, rg_status_str(status));
        s->dead = true;
        transport_shutdown(s->conn);
    }
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

/* RGPU_TRACE_CALLS=1: every call on the wire to stderr, with the calling thread and the
 * session's server (a debugging aid: the last lines of a hung program say who waits where). */
static void trace_call(const struct cli_session *s, const Rgpu__Call *msg, unsigned flags)
{
    char line[512];
    int n = snprintf(line, sizeof(line), "rgpu call [tid %ld %s] %llu %s%s", (long)gettid(),
                     s->server, (unsigned long long)msg->id, proto_op_name(msg->op),
                     flags & PROTO_FLAG_NOREPLY ? " (async)" : "");

    for (size_t i = 0; i < msg->n_args && n > 0 && (size_t)n < sizeof(line) - 24; i++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, " %#llx",
                      (unsigned long long)msg->args[i]);
    fprintf(stderr, "%s data=%zu\n", line, msg->data.len);
}

static CUresult wait_reply(struct cli_session *s, struct cli_call *call, uint64_t id,
                           CUresult *result_p);

/* Read the replies of deferred DtoH copies now. Needed before sending more once they carry
 * much data: the worker blocks writing them while we would block writing to it. */
static CUresult deferred_drain(struct cli_session *s)
{
    CUresult res = cli_batch_flush(s), ignored;

    return res == CUDA_SUCCESS ? wait_reply(s, NULL, 0, &ignored) : res;
}

/* Append a frame to the batch; false if it does not fit even when empty. wake: the flusher is
 * to write it within BATCH_DELAY_US (not when the caller writes the batch itself now). */
static bool batch_append(struct cli_session *s, const Rgpu__Call *msg, unsigned flags, bool wake)
{
    size_t n = proto_frame_pack(s->batch + s->batch_len, BATCH_SIZE - s->batch_len, PROTO_CALL,
                                flags, &msg->base, 0);

    if (n == 0 && s->batch_len > 0 && cli_batch_flush(s) == CUDA_SUCCESS)
        n = proto_frame_pack(s->batch, BATCH_SIZE, PROTO_CALL, flags, &msg->base, 0);
    if (n == 0)
        return false;
    if (s->batch_len == 0 && wake)
        pthread_cond_signal(&s->batch_cond);
    s->batch_len += n;
    if (s->batch_len >= BATCH_FLUSH_AT)
        cli_batch_flush(s);
    return true;
}

/* An op the server's protocol does not have (new in a minor after the session's): refused
 * with CUDA_ERROR_NOT_SUPPORTED before it is sent, and said by name once. Lock held. */
static CUresult refuse_op(struct cli_session *s, unsigned op)
{
    if (op < PROTO_OP_COUNT && !s->op_refused[op]) {
        s->op_refused[op] = true;
        rg_error("gpu-server at %s speaks protocol %u.%u, which has no %s (new in %u.%u): "
                 "CUDA_ERROR_NOT_SUPPORTED",
                 s->server, PROTO_VERSION, s->proto_minor, proto_op_name(op), proto_ops[op].major,
                 proto_ops[op].minor);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult send_call(struct cli_session *s, struct cli_call *call, unsigned flags,
                          uint64_t *id_p)
{
    Rgpu__Call msg = RGPU__CALL__INIT;
    bool inline_data = call->data_len <= PROTO_INLINE_MAX;
    rg_status_t status;
    CUresult res;

    if (s->dead)
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    if (s->forked) /* as in CUDA: a forked child cannot use its parent's context */
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!proto_op_in_minor(call->op, s->proto_minor))
        return refuse_op(s, call->op);
    if (s->deferred_bytes > DEFERRED_DRAIN_AT && (res = deferred_drain(s)) != CUDA_SUCCESS)
        return res;
    msg.id = s->next_call_id++;
    call->id = msg.id;
    if (call->on_send != NULL)
        call->on_send(call->on_send_arg);
    msg.op = call->op;
    msg.ctx = call->ctx;
    msg.n_args = call->nargs;
    msg.args = (uint64_t *)call->a.words;
    if (inline_data && call->data_len > 0) {
        msg.data.data = (uint8_t *)call->data;
        msg.data.len = call->data_len;
    }
    *id_p = msg.id;
    if (s->trace_calls)
        trace_call(s, &msg, flags);
    if ((flags & PROTO_FLAG_NOREPLY) && inline_data && batch_append(s, &msg, flags, true))
        return s->dead ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_SUCCESS;
    /* A synchronous call goes out in the same write as the batch before it: the worker wakes
     * once for both, not twice. */
    if (inline_data && s->batch_len > 0 && batch_append(s, &msg, flags, false))
        return cli_batch_flush(s);
    if ((res = cli_batch_flush(s)) != CUDA_SUCCESS)
        return res;
    status = proto_send_flags(s->conn, PROTO_CALL, flags, &msg.base,
                              inline_data ? NULL : call->data, inline_data ? 0 : call->data_len);
    return status == RG_OK ? CUDA_SUCCESS : cli_session_lost(s, "send", status);
}

/* Receive bulk of len bytes into dst (cap bytes of room), dropping what does not fit. */
static rg_status_t recv_bulk(struct cli_session *s, void *dst, size_t cap, uint64_t len,
                             size_t *got_p)
{
    size_t take = len < cap ? (size_t)len : cap;
    rg_status_t status = RG_OK;

    if (take > 0)
        status = transport_recv(s->conn, dst, take);
    if (status == RG_OK && len > take)
        status = proto_discard(s->conn, len - take);
    *got_p = take;
    return status;
}

static void take_async_error(struct cli_session *s, const uint8_t *buf, size_t len)
{
    Rgpu__AsyncError *e = rgpu__async_error__unpack(&s->arena.allocator, len, buf);

    if (e == NULL)
        return;
    rg_debug("asynchronous %s failed: %s", proto_op_name(e->op), e->message ? e->message : "");
    if (s->async_error == CUDA_SUCCESS)
        s->async_error = (CUresult)e->result;
    rgpu__async_error__free_unpacked(e, &s->arena.allocator);
    proto_arena_reset(&s->arena);
}

static void fill_reply(struct cli_call *call, const Rgpu__Reply *r)
{
    call->nout = (unsigned)r->n_out;
    for (size_t i = 0; call->out != NULL && i < r->n_out && i < call->out_cap; i++)
        call->out[i] = r->out[i];
    call->rdata_len = 0;
    if (r->data.len > 0 && call->rdata != NULL) {
        call->rdata_len = r->data.len < call->rdata_cap ? r->data.len : call->rdata_cap;
        memcpy(call->rdata, r->data.data, call->rdata_len);
    }
}

/* A reply to a deferred DtoH call: its data lands in the registered destination. */
static CUresult take_deferred(struct cli_session *s, const struct proto_frame_hdr *hdr,
                              const Rgpu__Reply *r)
{
    struct deferred d = s->deferred[0];
    size_t got = 0;
    rg_status_t status = RG_OK;

    memmove(s->deferred, s->deferred + 1, --s->ndeferred * sizeof(*s->deferred));
    s->deferred_bytes -= d.len;
    if (r->data.len > 0)
        memcpy(d.dst, r->data.data, r->data.len < d.len ? r->data.len : d.len);
    if (hdr->bulk_len > 0)
        status = recv_bulk(s, d.dst, d.len, hdr->bulk_len, &got);
    if (status != RG_OK)
        return cli_session_lost(s, "receive", status);
    if (r->result != CUDA_SUCCESS && s->async_error == CUDA_SUCCESS)
        s->async_error = (CUresult)r->result;
    return CUDA_SUCCESS;
}

/* Read one Reply frame (already received header and message) for id or a deferred call.
 * Returns true in *done_p when it was the reply to `call`. */
static CUresult take_reply(struct cli_session *s, const struct proto_frame_hdr *hdr,
                           struct cli_call *call, uint64_t id, bool *done_p, CUresult *result_p)
{
    Rgpu__Reply *r = rgpu__reply__unpack(&s->arena.allocator, hdr->msg_len, s->recv_buf);
    CUresult res = CUDA_SUCCESS;
    size_t got = 0;
    rg_status_t status;

    if (r == NULL)
        return cli_session_lost(s, "receive", RG_ERR_PROTO);
    if (s->ndeferred > 0 && r->id == s->deferred[0].id) {
        res = take_deferred(s, hdr, r);
    } else if (r->id == id && call != NULL) {
        fill_reply(call, r);
        status = recv_bulk(s, (uint8_t *)call->rdata + call->rdata_len,
                           call->rdata_cap - call->rdata_len, hdr->bulk_len, &got);
        call->rdata_len += got;
        *result_p = (CUresult)r->result;
        *done_p = true;
        if (status != RG_OK)
            res = cli_session_lost(s, "receive", status);
    } else {
        rg_error("reply %llu from %s matches no call", (unsigned long long)r->id, s->server);
        res = cli_session_lost(s, "receive", RG_ERR_PROTO);
    }
    rgpu__reply__free_unpacked(r, &s->arena.allocator);
    proto_arena_reset(&s->arena);
    return res;
}

/* What the session's kernels printed (device printf): to this process's stdout, as locally. */
static rg_status_t take_output(struct cli_session *s, uint64_t len, unsigned flags)
{
    FILE *to = (flags & PROTO_OUTPUT_STDERR) ? stderr : stdout;
    char buf[16384];

    while (len > 0) {
        size_t n = len < sizeof(buf) ? (size_t)len : sizeof(buf);
        rg_status_t st = transport_recv(s->conn, buf, n);
        if (st != RG_OK)
            return st;
        fwrite(buf, 1, n, to);
        len -= n;
    }
    fflush(to);
    return RG_OK;
}

/* No frame for session_timeout_ms, not even a keepalive: the worker stopped answering. */
static CUresult session_silent(struct cli_session *s)
{
    if (!s->dead) {
        rg_error("gpu-server at %s sent nothing for %d ms while a call waited (session_timeout, "
                 "RGPU_SESSION_TIMEOUT_MS): the session no longer answers; every CUDA call now "
                 "fails with CUDA_ERROR_DEVICE_UNAVAILABLE",
                 s->server, s->session_timeout_ms);
        s->dead = true;
        transport_shutdown(s->conn);
    }
    return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

/* Process frames until the reply to id arrives (id 0: until no deferred reply is pending). */
static CUresult wait_reply(struct cli_session *s, struct cli_call *call, uint64_t id,
                           CUresult *result_p)
{
    struct proto_frame_hdr hdr;
    bool done = false;
    rg_status_t status;
    CUresult res;

    while (!done && (id != 0 || s->ndeferred > 0)) {
        status = proto_recv(s->conn, &hdr, s->recv_buf, RECV_BUF_SIZE);
        if (status == RG_ERR_TIMEOUT && s->session_timeout_ms > 0)
            return session_silent(s);
        if (status != RG_OK)
            return cli_session_lost(s, "receive", status);
        if (hdr.type == PROTO_KEEPALIVE) { /* the worker is busy with our call: it answers */
            if (hdr.bulk_len > 0 && proto_discard(s->conn, hdr.bulk_len) != RG_OK)
                return cli_session_lost(s, "receive", RG_ERR_IO);
            continue;
        }
        if (hdr.type == PROTO_OUTPUT) {
            if (take_output(s, hdr.bulk_len, hdr.flags) != RG_OK)
                return cli_session_lost(s, "receive", RG_ERR_IO);
            continue;
        }
        if (hdr.type == PROTO_ASYNC_ERROR) {
            take_async_error(s, s->recv_buf, hdr.msg_len);
            if (hdr.bulk_len > 0 && proto_discard(s->conn, hdr.bulk_len) != RG_OK)
                return cli_session_lost(s, "receive", RG_ERR_IO);
            continue;
        }
        if (hdr.type != PROTO_REPLY)
            return cli_session_lost(s, "unexpected frame", RG_ERR_PROTO);
        res = take_reply(s, &hdr, call, id, &done, result_p);
        if (res != CUDA_SUCCESS)
            return res;
    }
    return CUDA_SUCCESS;
}

/* The session a call goes to: its context's (call->sess), else the first. */
static struct cli_session *session_of(const struct cli_call *call)
{
    return call->sess != NULL ? call->sess : cli_proc.sessions[0];
}

/* ---- waits of a session with NCCL ranks on several of its devices --------------------------
 * One process that drives several devices of a server with NCCL (XLA, CuPy, DataParallel)
 * has a thread per device whose collectives meet on the GPUs. A thread that waits for its
 * device (a stream, event or context synchronization, a device-to-host copy) may wait for a
 * collective whose peer another thread has not sent yet: natively that thread sends it
 * meanwhile. Here the session is one ordered call stream: a wait that held the session's lock
 * until its reply (and the worker's one thread inside the driver's wait) would keep the peer's
 * collective from ever reaching the GPU. So in such a session the wait is first polled with the
 * matching query (each a short call, the lock free in between, so that the other threads' calls
 * go out and run), and made only once its work is done. Set when a second context of the session
 * makes an NCCL communicator. */

/* Note the context of an NCCL communicator's creation (lock held). */
static void note_nccl_ctx(struct cli_session *s, const struct cli_call *call)
{
    if (call->op != PROTO_OP_NCCL_COMM_INIT && call->op != PROTO_OP_NCCL_COMM_INIT_SCALABLE &&
        call->op != PROTO_OP_NCCL_COMM_SPLIT && call->op != PROTO_OP_NCCL_COMM_SHRINK)
        return;
    if (s->nccl_ctx == 0)
        s->nccl_ctx = call->ctx;
    else if (call->ctx != s->nccl_ctx && !s->poll_waits) {
        s->poll_waits = true;
        rg_debug("NCCL ranks on several contexts of %s: waits are polled", s->server);
    }
}

/* The query that tells whether `call` (a wait, or a device-to-host copy) would wait now; false
 * for any other call. */
static bool wait_query(const struct cli_call *call, struct cli_call *q)
{
    *q = (struct cli_call){
        .op = PROTO_OP_STREAM_QUERY, .nargs = 1, .ctx = call->ctx, .sess = call->sess};
    switch (call->op) {
    case PROTO_OP_STREAM_SYNCHRONIZE:
        q->a.STREAM_QUERY.stream = call->a.STREAM_SYNCHRONIZE.stream;
        return true;
    case PROTO_OP_CTX_SYNCHRONIZE:
        q->a.STREAM_QUERY.stream = 0;
        return true; /* the legacy stream */
    case PROTO_OP_MEMCPY_DTOH:
        q->a.STREAM_QUERY.stream = call->a.MEMCPY_DTOH.stream;
        return true;
    case PROTO_OP_EVENT_SYNCHRONIZE:
        q->op = PROTO_OP_EVENT_QUERY;
        q->a.EVENT_QUERY.event = call->a.EVENT_SYNCHRONIZE.event;
        return true;
    default:
        return false;
    }
}

static CUresult wait_reply(struct cli_session *s, struct cli_call *call, uint64_t id,
                           CUresult *result_p);

/* Poll q until its work is done: CUDA_SUCCESS then (an error of the query, such as a pending
 * asynchronous failure, is left for the wait itself to report). */
static CUresult poll_idle(struct cli_session *s, struct cli_call *q)
{
    useconds_t nap = 10;

    for (;;) {
        struct cli_call c = *q;
        CUresult res, result = CUDA_ERROR_NOT_READY;
        uint64_t id = 0;

        pthread_mutex_lock(&s->lock);
        res = send_call(s, &c, 0, &id);
        if (res == CUDA_SUCCESS)
            res = wait_reply(s, &c, id, &result);
        pthread_mutex_unlock(&s->lock);
        if (res != CUDA_SUCCESS)
            return res;
        if (result != CUDA_ERROR_NOT_READY)
            return CUDA_SUCCESS;
        usleep(nap);
        nap = nap < 400 ? nap * 2 : 400;
    }
}

CUresult cli_session_call(struct cli_call *call)
{
    struct cli_session *s = session_of(call);
    CUresult res, result = CUDA_SUCCESS;
    double since = cli_stats_now_us();
    uint64_t id = 0;
    bool waited = false, lost = false;
    struct cli_call q;

    if (s->poll_waits && wait_query(call, &q) && (res = poll_idle(s, &q)) != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&s->lock);
    note_nccl_ctx(s, call);
    res = send_call(s, call, 0, &id);
    if (res == CUDA_SUCCESS) {
        waited = true;
        res = wait_reply(s, call, id, &result);
        lost = res != CUDA_SUCCESS;
    }
    cli_stats_count(call->op, true, since);
    if (res == CUDA_SUCCESS) {
        res = result;
        if (res != CUDA_SUCCESS)
            rg_debug("%s returned %d", proto_op_name(call->op), (int)res);
        if (s->async_error != CUDA_SUCCESS) {
            if (res == CUDA_SUCCESS)
                res = s->async_error;
            s->async_error = CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&s->lock);
    /* A synchronizing op: the layers above finish their part (data lanes, host mirrors). */
    return waited ? cli_session_synced(s, call, res, lost) : res;
}

CUresult cli_session_send(struct cli_call *call)
{
    struct cli_session *s = session_of(call);
    CUresult res;
    uint64_t id;

    pthread_mutex_lock(&s->lock);
    res = send_call(s, call, PROTO_FLAG_NOREPLY, &id);
    cli_stats_count(call->op, false, 0);
    pthread_mutex_unlock(&s->lock);
    return res;
}

static bool deferred_push(struct cli_session *s, uint64_t id, void *dst, size_t len)
{
    if (!rg_array_grow((void **)&s->deferred, &s->deferred_cap, s->ndeferred, sizeof(*s->deferred),
                       16))
        return false;
    s->deferred[s->ndeferred++] = (struct deferred){id, dst, len};
    s->deferred_bytes += len;
    return true;
}

CUresult cli_session_call_deferred(struct cli_call *call, void *dst, size_t len)
{
    struct cli_session *s = session_of(call);
    CUresult res, result = CUDA_SUCCESS;
    uint64_t id = 0;
    struct cli_call q;

    if (s->poll_waits && wait_query(call, &q) && (res = poll_idle(s, &q)) != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&s->lock);
    res = send_call(s, call, 0, &id);
    cli_stats_count(call->op, false, 0);
    if (res == CUDA_SUCCESS && !deferred_push(s, id, dst, len)) {
        /* No room to remember it: wait for it now instead. */
        call->rdata = dst;
        call->rdata_cap = len;
        res = wait_reply(s, call, id, &result);
        if (res == CUDA_SUCCESS)
            res = result;
    }
    pthread_mutex_unlock(&s->lock);
    return res;
}

CUresult cli_session_fence(struct cli_session *sess, uint64_t ctx)
{
    struct cli_call call = {.op = PROTO_OP_NOP, .ctx = ctx, .sess = sess};
    struct cli_session *s = session_of(&call);
    CUresult res, result = CUDA_SUCCESS;
    double since = cli_stats_now_us();
    uint64_t id = 0;

    pthread_mutex_lock(&s->lock);
    res = s->said_bye ? CUDA_ERROR_DEINITIALIZED : send_call(s, &call, 0, &id);
    if (res == CUDA_SUCCESS)
        res = wait_reply(s, &call, id, &result);
    cli_stats_count(call.op, true, since);
    pthread_mutex_unlock(&s->lock);
    return res;
}
